package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Claim implements inbox.Store. It sends one pipeline of plain commands (one round trip,
// no script): SET the lease key NX with PX Config.Lease (GET returns a lease held
// already), read the committed key, and bump the fencing counter; with rec.Attempt set,
// the start script, in the same pipeline, starts the attempt once the lease is this
// delivery's, so that duplicates and deliveries waiting on the key start none, and
// reports the attempts that died (inbox.Claim.Unfinished). A committed
// key is a duplicate; a lease another delivery holds makes it wait, blocked on the key's
// release list, for that delivery to commit or release, or for the lease to expire, at
// most Config.Wait.
func (s *Store) Claim(ctx context.Context, rec contract.Record) (contract.Claim, error) {
	k := s.keys(rec.Consumer, rec.Key)
	if err := s.checkTag(k); err != nil {
		return contract.Claim{}, err
	}
	// The lease token is the attempt's when attempts are counted, so that EndAttempt
	// drops the lease of a claim whose reply was lost.
	token := rec.Attempt
	if token == "" {
		token = randomToken()
	}
	start := time.Now()
	for waiting := false; ; waiting = true {
		v, err := s.tryClaim(ctx, k, token, rec.Attempt, waiting)
		if err != nil {
			return s.claimFailed(ctx, rec, k, err)
		}
		switch {
		case v.done:
			return contract.Claim{Duplicate: true, Fingerprint: v.fingerprint, Output: v.output}, nil
		case (v.held == "" || v.held == token) && v.unfinished >= 0: // ours (or ours already: go-redis resent it)
			return contract.Claim{Tx: s.newTx(rec, k, token, v.fence, v.generation), Unfinished: v.unfinished}, nil
		}
		if !waiting {
			continue // count ourselves as a waiter, check again, then block
		}
		left := s.cfg.Wait - time.Since(start)
		if left <= 0 {
			// No longer a waiter: a release need not wake us (best effort: a stale
			// entry only wakes a later waiter once, and expires with the lease).
			_ = s.client.SRem(context.WithoutCancel(ctx), k.name(kindWaiters), token).Err()
			return contract.Claim{}, fmt.Errorf("redisstore: waited %v for the delivery holding the key's lease: %w (raise Config.Wait, or Config.Lease if handlers are slow)",
				s.cfg.Wait, contract.ErrContended)
		}
		block := min(left, s.block)
		if v.ttl > 0 {
			block = min(block, v.ttl+time.Millisecond) // a dead holder's lease expires
		}
		cmd := redis.NewStringSliceCmd(ctx, "blpop", k.name(kindRelease), strconv.FormatFloat(max(block.Seconds(), 0.001), 'f', 3, 64))
		if err := s.client.Process(ctx, cmd); err != nil && !errors.Is(err, redis.Nil) {
			return s.claimFailed(ctx, rec, k, err)
		}
	}
}

// verdict is what one claim pipeline found.
type verdict struct {
	done                bool
	fingerprint, output []byte
	held                string        // the lease token another delivery holds, "" if we took it
	fence               int64         // the claim's fencing token
	generation          string        // the last Forget's token, "" if none
	unfinished          int           // earlier attempts never ended; -1 if none was recorded
	ttl                 time.Duration // the held lease's time left
}

// tryClaim sends the claim pipeline. The lease is set before the committed key is read: a
// commit needs the lease, so a key found uncommitted after taking the lease stays so. A
// waiting delivery first adds itself to the waiters (a set: counted once however often
// it loops, and however often go-redis resends), so that a release after this pipeline
// wakes it. Every command of it gives the first run's answer when resent: the SET NX
// GET finds this claim's own token, the attempt is a member of a set.
func (s *Store) tryClaim(ctx context.Context, k claimKeys, token, attempt string, waiting bool) (verdict, error) {
	v, err := s.claimPipeline(ctx, k, token, attempt, waiting)
	if redis.HasErrorPrefix(err, "NOSCRIPT") { // the script cache was flushed: load it, and resend the pipeline
		if err = startScript.Load(ctx, s.client).Err(); err == nil {
			v, err = s.claimPipeline(ctx, k, token, attempt, waiting)
		}
	}
	return v, err
}

func (s *Store) claimPipeline(ctx context.Context, k claimKeys, token, attempt string, waiting bool) (verdict, error) {
	claimKey, lease := k.name(kindClaim), k.name(kindLease)
	pipe := s.client.Pipeline()
	if waiting {
		pipe.SAdd(ctx, k.name(kindWaiters), token)
		pipe.PExpire(ctx, k.name(kindWaiters), s.cfg.Lease)
	}
	set := pipe.Do(ctx, "set", lease, token, "nx", "get", "px", ms(s.cfg.Lease))
	done := pipe.HMGet(ctx, claimKey, "t", "f", "o", "g")
	fence := pipe.HIncrBy(ctx, claimKey, "n", 1)
	pipe.Do(ctx, "pexpire", claimKey, ms(s.cfg.Retention), "nx") // a claim never committed expires too
	var started *redis.Cmd
	if attempt != "" {
		started = startScript.EvalSha(ctx, pipe, []string{k.name(kindAttempts), lease, claimKey}, token, attempt, ms(s.cfg.Retention))
	}
	var ttl *redis.DurationCmd
	if waiting {
		ttl = pipe.PTTL(ctx, lease)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return verdict{}, err
	}
	var v verdict
	if held, err := set.Text(); err == nil {
		v.held = held
	} else if !errors.Is(err, redis.Nil) {
		return v, err
	}
	fields, err := done.Result()
	if err != nil {
		return v, err
	}
	if fields[0] != nil {
		v.done, v.fingerprint, v.output = true, bulk(fields[1]), bulk(fields[2])
		return v, nil
	}
	v.generation = string(bulk(fields[3]))
	if v.fence, err = fence.Result(); err != nil {
		return v, err
	}
	if started != nil {
		n, err := started.Int()
		if err != nil {
			return v, err
		}
		v.unfinished = n
	}
	if ttl != nil {
		v.ttl = ttl.Val()
	}
	return v, nil
}

// checkTag refuses a hash tag that would not keep the claim's keys in one slot.
func (s *Store) checkTag(k claimKeys) error {
	if k.tag == "" || containsBrace(k.tag) {
		return fmt.Errorf("redisstore: Config.HashTag returned %q: return a non-empty tag without '{' or '}'", k.tag)
	}
	return nil
}

func containsBrace(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '{' || s[i] == '}' {
			return true
		}
	}
	return false
}

// claimFailed returns the error of a claim Redis did not answer, or, with
// DangerouslyProcessWithoutDedupWhenUnreachable and an unreachable Redis, a claim that
// lets the handler run without deduplication.
func (s *Store) claimFailed(ctx context.Context, rec contract.Record, k claimKeys, err error) (contract.Claim, error) {
	if !unreachable(err) {
		return contract.Claim{}, fmt.Errorf("redisstore: claiming the key: %w", err)
	}
	if !s.cfg.DangerouslyProcessWithoutDedupWhenUnreachable {
		return contract.Claim{}, fmt.Errorf("redisstore: claiming the key: %w, so the message is not processed: %w", ErrUnreachable, err)
	}
	s.cfg.Logger.Error("redisstore: Redis is unreachable: processing the message WITHOUT deduplication (DangerouslyProcessWithoutDedupWhenUnreachable)",
		err, watermill.LogFields{"consumer": rec.Consumer, "key": rec.Key})
	tx := s.newTx(rec, k, randomToken(), 0, anyGeneration)
	tx.degraded = true
	return contract.Claim{Tx: tx}, nil
}
