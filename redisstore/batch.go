package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Batches (inbox.BatchStore) use the key layout and the guarantees of single messages
// (ADRs 40, 42, 65, 68, 102): the claim is one script that takes the leases of all the
// batch's keys that are not committed, or none when another delivery holds one of them
// (the claim then joins that key's waiter set, as a single claim does, waits on its
// release list and tries again), so that two overlapping batches never each hold part
// of the other's keys. It reads each new key's generation. The commit is one script that
// checks every lease and generation (a Forget of a key since the claim refuses the
// commit, ErrLeaseLost), runs the handler's queued commands once, stores every key with
// the commands that failed, ends the keys' attempts and wakes their waiters; a resend
// gives the first run's answer. Singles and batches share the keys: a key processed
// alone is a duplicate in a batch and the other way round, and each wakes the other's
// waiters. On a Redis Cluster a script reaches one hash slot: all the keys of a batch
// must share one (Config.HashTag must return one tag for them, e.g. the partition or
// the account the batch is for), or the batch is refused with ErrCrossSlot before
// anything is claimed. A batch counts no attempts: inbox.ProcessBatch refuses an Inbox
// with MaxAttempts.

var (
	//go:embed lua/claim_batch.lua
	claimBatchLua string
	//go:embed lua/commit_batch.lua
	commitBatchLua string
	//go:embed lua/release_batch.lua
	releaseBatchLua string

	claimBatchScript   = redis.NewScript(claimBatchLua)
	commitBatchScript  = redis.NewScript(commitBatchLua)
	releaseBatchScript = redis.NewScript(releaseBatchLua)
)

var _ contract.BatchStore = (*Store)(nil)

// batchClaims are the new keys of a batch the Tx holds.
type batchClaims struct {
	recs []contract.Record
	keys []claimKeys
	gens []string // each key's generation as the claim read it
}

// ClaimBatch implements inbox.BatchStore. A Redis that cannot be reached fails the
// batch (ErrUnreachable), whatever Config.DangerouslyProcessWithoutDedupWhenUnreachable
// says: a batch is never processed without deduplication.
func (s *Store) ClaimBatch(ctx context.Context, recs []contract.Record) (contract.BatchClaim, error) {
	keys := make([]claimKeys, len(recs))
	scriptKeys := make([]string, 0, 3*len(recs))
	for i, r := range recs {
		keys[i] = s.keys(r.Consumer, r.Key)
		if err := s.checkTag(keys[i]); err != nil {
			return contract.BatchClaim{}, err
		}
		if s.slots && Slot(keys[i].name(kindClaim)) != Slot(keys[0].name(kindClaim)) {
			return contract.BatchClaim{}, fmt.Errorf("redisstore: the batch's key %q is in slot %d, its first key %q in slot %d: %w; nothing was claimed: make Config.HashTag return one tag for the keys of a batch (e.g. the partition it comes from)",
				recs[i].Key, Slot(keys[i].name(kindClaim)), recs[0].Key, Slot(keys[0].name(kindClaim)), ErrCrossSlot)
		}
		scriptKeys = append(scriptKeys, keys[i].name(kindClaim), keys[i].name(kindLease), keys[i].name(kindWaiters))
	}
	token := randomToken()
	start := time.Now()
	for waiting := false; ; waiting = true {
		res, err := claimBatchScript.Run(ctx, s.client, scriptKeys, token, ms(s.cfg.Lease), ms(s.cfg.Retention), flag(waiting)).Slice()
		if err != nil {
			if unreachable(err) {
				err = fmt.Errorf("%w, so the batch is not processed: %w", ErrUnreachable, err)
			}
			return contract.BatchClaim{}, fmt.Errorf("redisstore: claiming the batch: %w", err)
		}
		if status, _ := res[0].(int64); status == 1 {
			return s.batchClaim(recs, keys, token, res)
		}
		if !waiting {
			continue // count ourselves as a waiter, check again, then block
		}
		held, _ := res[1].(int64)
		left := s.cfg.Wait - time.Since(start)
		if left <= 0 {
			// No longer a waiter (best effort, as for a single claim).
			_ = s.client.SRem(context.WithoutCancel(ctx), keys[held-1].name(kindWaiters), token).Err()
			return contract.BatchClaim{}, fmt.Errorf("redisstore: waited %v for the delivery holding the lease of the batch's key %q: %w (raise Config.Wait, or Config.Lease if handlers are slow)",
				s.cfg.Wait, recs[held-1].Key, contract.ErrContended)
		}
		block := min(left, s.block)
		if ttl, _ := res[2].(int64); ttl > 0 {
			block = min(block, time.Duration(ttl)*time.Millisecond+time.Millisecond) // a dead holder's lease expires
		}
		cmd := redis.NewStringSliceCmd(ctx, "blpop", keys[held-1].name(kindRelease), strconv.FormatFloat(max(block.Seconds(), 0.001), 'f', 3, 64))
		if err := s.client.Process(ctx, cmd); err != nil && !errors.Is(err, redis.Nil) {
			return contract.BatchClaim{}, fmt.Errorf("redisstore: waiting for a key of the batch: %w", err)
		}
	}
}

// batchClaim reads the claim script's answer: per key whether it was committed, with
// its fingerprint; the others are this delivery's, with their generation.
func (s *Store) batchClaim(recs []contract.Record, keys []claimKeys, token string, res []any) (contract.BatchClaim, error) {
	if len(res) != 2+2*len(recs) {
		return contract.BatchClaim{}, fmt.Errorf("redisstore: the claim script answered %d values for %d keys", len(res), len(recs))
	}
	claim := contract.BatchClaim{Duplicate: make([]bool, len(recs)), Fingerprint: make([][]byte, len(recs))}
	fresh := batchClaims{}
	for i := range recs {
		if done, _ := res[2+2*i].(int64); done == 1 {
			claim.Duplicate[i], claim.Fingerprint[i] = true, bulk(res[3+2*i])
			continue
		}
		fresh.recs = append(fresh.recs, recs[i])
		fresh.keys = append(fresh.keys, keys[i])
		fresh.gens = append(fresh.gens, string(bulk(res[3+2*i])))
	}
	if len(fresh.recs) > 0 {
		fence, _ := res[1].(int64)
		tx := s.newTx(fresh.recs[0], fresh.keys[0], token, fence, fresh.gens[0])
		tx.batch = &fresh
		claim.Tx = tx
	}
	return claim, nil
}

// ClaimBatchIn implements inbox.BatchStore: it returns an error wrapping ErrNoJoin, as
// ClaimIn does.
func (s *Store) ClaimBatchIn(context.Context, any, []contract.Record) (contract.BatchClaim, error) {
	return contract.BatchClaim{}, fmt.Errorf("redisstore: %w: remove the transaction from the context (inbox.ContextWithTx)", ErrNoJoin)
}

// commitBatch is Commit for a batch: one script checks every lease and generation, runs
// the queued commands once, stores every key with the commands that failed, ends the
// keys' attempts and wakes their waiters; a resend gives the first run's answer.
func (t *Tx) commitBatch(ctx context.Context, cmds []redis.Cmder) error {
	b := t.batch
	argv, handlerKeys, err := t.store.encode(ctx, t.keys, cmds)
	if err != nil {
		return err
	}
	s := t.store
	args := []any{t.token, ms(s.cfg.Retention), ms(s.cfg.Lease), len(b.recs), time.Now().UnixMilli(), len(cmds)}
	keys := make([]string, 0, 5*len(b.recs)+len(handlerKeys))
	for i, r := range b.recs {
		k := b.keys[i]
		args = append(args, r.Fingerprint, flag(r.Fingerprint != nil), b.gens[i])
		keys = append(keys, k.name(kindClaim), k.name(kindLease), k.name(kindRelease), k.name(kindWaiters), k.name(kindAttempts))
	}
	args = append(args, argv...)
	keys = append(keys, handlerKeys...)
	res, err := s.runScript(ctx, commitBatchScript, keys, args)
	if err != nil {
		return fmt.Errorf("redisstore: committing the batch: %w", err)
	}
	t.finished = true
	if status, _ := res[0].(int64); status == 0 {
		return fmt.Errorf("redisstore: commit refused, nothing applied: another delivery took a key of the batch (raise Config.Lease above the slowest handler), or Forget deleted one since the claim: %w", ErrLeaseLost)
	}
	return commandErrors(res)
}

// releaseBatch is Rollback for a batch: it drops the leases this delivery still holds
// and wakes their waiters.
func (t *Tx) releaseBatch(ctx context.Context) error {
	keys := make([]string, 0, 3*len(t.batch.keys))
	for _, k := range t.batch.keys {
		keys = append(keys, k.name(kindLease), k.name(kindWaiters), k.name(kindRelease))
	}
	if err := releaseBatchScript.Run(context.WithoutCancel(ctx), t.store.client, keys, t.token, ms(t.store.cfg.Lease)).Err(); err != nil {
		return fmt.Errorf("redisstore: releasing the batch's leases (they expire after Config.Lease): %w", err)
	}
	return nil
}
