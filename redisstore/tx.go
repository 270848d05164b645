package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Tx is the handle a handler gets from inbox.TxFromContext[*redisstore.Tx] (or
// [redis.Pipeliner]). It is a redis.Pipeliner whose commands are queued, not sent: they
// run at commit, in one script, only if this delivery still holds the key's lease, and
// atomically with the key. So their replies are not available to the handler (read
// with the client itself), and Exec, Discard and the nested pipelines are the inbox's:
// Pipelined(fn) queues fn's commands here; Exec and Discard end the transaction, and the
// inbox then refuses to commit (inbox.ErrTxDone).
//
// A command that Redis refuses in a script (WATCH, MULTI, blocking or pub/sub commands)
// is refused at commit with ErrCommandRefused, nothing applied. On a Cluster every key a
// command touches must be in the claim's slot: put Tag() in it.
type Tx struct {
	redis.Pipeliner // a pipeline of a client that never connects: it only collects

	store    *Store
	rec      contract.Record
	keys     claimKeys
	token    string
	fence    int64
	gen      string       // the claim's generation (the last Forget's token), checked at commit
	degraded bool         // Redis was unreachable at claim: no lease, no deduplication
	batch    *batchClaims // the new keys of a batch (ClaimBatch); nil for one key
	ended    bool         // the handler called Exec or Discard
	finished bool         // committed or rolled back
}

// collector is the client the Tx pipelines come from: its pipeline hook keeps the
// commands Exec hands it and sends nothing, so Tx.Commit gets them back from Exec.
var collector = func() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "collector.invalid:0"})
	c.AddHook(collectHook{})
	return c
}()

type collectHook struct{}

func (collectHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (collectHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(context.Context, redis.Cmder) error {
		return errors.New("redisstore: a command of the inbox transaction was sent on its own: only Commit sends them")
	}
}
func (collectHook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { return nil }
}

func (s *Store) newTx(rec contract.Record, k claimKeys, token string, fence int64, gen string) *Tx {
	return &Tx{Pipeliner: collector.Pipeline(), store: s, rec: rec, keys: k, token: token, fence: fence, gen: gen}
}

// Fence returns the claim's fencing token: it grows with each claim of the key (within
// Config.Retention), so an external system that remembers the highest token it saw can
// refuse a write from a delivery whose lease was taken over. It is 0 for a delivery
// processed without deduplication.
func (t *Tx) Fence() int64 { return t.fence }

// Tag returns the claim's hash tag in braces, e.g. "{7:billing:order-1}". A key that
// contains it is in the claim's Redis Cluster slot: "balance:" + tx.Tag().
func (t *Tx) Tag() string { return "{" + t.keys.tag + "}" }

// Exec ends the transaction without sending anything: only the inbox commits. The
// inbox's commit then fails with inbox.ErrTxDone and the message is nacked.
func (t *Tx) Exec(context.Context) ([]redis.Cmder, error) {
	t.end()
	return nil, fmt.Errorf("redisstore: %w: return nil from the handler, the inbox runs the queued commands at commit", contract.ErrTxDone)
}

// Discard drops the queued commands and ends the transaction, as Exec does.
func (t *Tx) Discard() { t.end() }

func (t *Tx) end() {
	t.ended = true
	t.Pipeliner.Discard()
}

// Pipelined runs fn on t: its commands are queued in the transaction. It returns no
// commands, and fn's error.
func (t *Tx) Pipelined(_ context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	return nil, fn(t)
}

// TxPipelined is Pipelined: the whole transaction is atomic already.
func (t *Tx) TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	return t.Pipelined(ctx, fn)
}

// Pipeline returns t: commands queued on it are the transaction's.
func (t *Tx) Pipeline() redis.Pipeliner { return t }

// TxPipeline returns t.
func (t *Tx) TxPipeline() redis.Pipeliner { return t }

// Handle implements inbox.Tx: it returns t.
func (t *Tx) Handle() any { return t }

// Commit implements inbox.Tx: one script that checks the lease, runs the queued commands,
// stores the key with fingerprint and output for Config.Retention, ends the key's
// attempts and wakes the waiting duplicates; then, with Config.Replicas, WAIT in the same
// round trip. A resent commit returns the first run's answer, failed commands included.
func (t *Tx) Commit(ctx context.Context, output []byte) error {
	switch {
	case t.ended:
		return fmt.Errorf("redisstore: %w", contract.ErrTxDone)
	case t.finished:
		return fmt.Errorf("redisstore: commit after the transaction ended: %w", contract.ErrTxDone)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: not committed: %w", err)
	}
	cmds, _ := t.Pipeliner.Exec(ctx) // the collector keeps them: nothing is sent
	if t.batch != nil {
		return t.commitBatch(ctx, cmds)
	}
	argv, keys, err := t.store.encode(ctx, t.keys, cmds)
	if err != nil {
		return err
	}
	s := t.store
	args := append([]any{t.token, ms(s.cfg.Retention), ms(s.cfg.Lease),
		t.rec.Fingerprint, flag(t.rec.Fingerprint != nil), output, flag(output != nil), len(cmds), time.Now().UnixMilli(), t.gen}, argv...)
	keys = append([]string{t.keys.name(kindClaim), t.keys.name(kindLease), t.keys.name(kindRelease),
		t.keys.name(kindWaiters), t.keys.name(kindAttempts)}, keys...)
	res, err := s.runCommit(ctx, keys, args)
	if t.degraded {
		t.finished = true
		return s.degradedCommitted(t, len(cmds), res, err)
	}
	if err != nil {
		return fmt.Errorf("redisstore: committing: %w", err)
	}
	t.finished = true
	if status, _ := res[0].(int64); status == 0 {
		return fmt.Errorf("redisstore: commit refused, nothing applied: another delivery took the key (raise Config.Lease above the slowest handler), or Forget deleted it since the claim: %w", ErrLeaseLost)
	}
	return commandErrors(res)
}

// commandErrors returns the error of a commit whose queued commands failed at run time.
func commandErrors(res []any) error {
	if len(res) < 2 {
		return nil
	}
	failed := make([]string, 0, len(res)-1)
	for _, r := range res[1:] {
		failed = append(failed, fmt.Sprint(r))
	}
	return fmt.Errorf("redisstore: key committed, but %w (Redis rolls nothing back; the others were applied): %s",
		ErrCommandFailed, strings.Join(failed, "; "))
}

// Rollback implements inbox.Tx: it drops the queued commands and, in one script, releases
// the lease if this delivery still holds it, ends the delivery's attempt (MaxAttempts:
// a clean failure is never counted) and wakes the waiting duplicates, even when ctx is
// cancelled. After a commit it does nothing.
func (t *Tx) Rollback(ctx context.Context) error { return t.release(ctx, t.rec.Attempt) }

// Abandon implements inbox.Tx: Rollback, leaving the delivery's attempt unfinished, so
// that it counts as one that died (the handler panicked).
func (t *Tx) Abandon(ctx context.Context) error { return t.release(ctx, "") }

func (t *Tx) release(ctx context.Context, attempt string) error {
	t.Pipeliner.Discard()
	if t.finished || t.degraded {
		return nil
	}
	t.finished = true
	if t.batch != nil {
		return t.releaseBatch(ctx)
	}
	ctx = context.WithoutCancel(ctx)
	err := releaseScript.Run(ctx, t.store.client,
		[]string{t.keys.name(kindLease), t.keys.name(kindWaiters), t.keys.name(kindRelease), t.keys.name(kindAttempts)},
		t.token, ms(t.store.cfg.Lease), attempt).Err()
	if err != nil {
		return fmt.Errorf("redisstore: releasing the lease (it expires after Config.Lease): %w", err)
	}
	return nil
}

// degradedCommitted reports the commit of a message processed without a claim (Redis
// was unreachable): the same script as any commit, with a token of its own, so it is
// safe to resend and applies nothing when another delivery committed the key or holds
// its lease meanwhile. While Redis is still unreachable a handler that queued nothing is
// let through (logged); one that queued commands fails, so that they are not lost.
func (s *Store) degradedCommitted(t *Tx, queued int, res []any, err error) error {
	switch {
	case err != nil && queued == 0 && unreachable(err):
		s.cfg.Logger.Error("redisstore: Redis is unreachable: processed the message WITHOUT deduplication and could not store its key",
			err, watermill.LogFields{"consumer": t.rec.Consumer, "key": t.rec.Key})
		return nil
	case err != nil:
		return fmt.Errorf("redisstore: applying the commands of a message processed without deduplication: %w", err)
	}
	if status, _ := res[0].(int64); status == 0 {
		return fmt.Errorf("redisstore: a message processed without deduplication (Redis was unreachable at its claim) is not committed, nothing applied: another delivery committed the key or holds its lease: %w", ErrLeaseLost)
	}
	return commandErrors(res)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
