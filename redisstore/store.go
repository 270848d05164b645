package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	_ "embed"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox"
)

var (
	//go:embed lua/commit.lua
	commitLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/attempt.lua
	attemptLua string

	commitScript  = redis.NewScript(commitLua)
	releaseScript = redis.NewScript(releaseLua)
	attemptScript = redis.NewScript(attemptLua)
)

// maxBlock bounds one BLPOP of a waiting duplicate, below go-redis's default 3s read
// timeout (a BLPOP sent with Process gets no longer read deadline); the wait then goes
// on with another claim attempt and another BLPOP.
const maxBlock = time.Second

// Store is an inbox.Store on Redis: see the package doc.
type Store struct {
	client redis.UniversalClient
	cfg    Config
	slots  bool // check the handler's keys' slots at commit
	block  time.Duration

	mu       sync.Mutex
	commands map[string]*redis.CommandInfo // from COMMAND, for checking queued commands
}

var _ inbox.Store = (*Store)(nil)

// New returns a Store on client: a *redis.Client, a *redis.ClusterClient (all keys of a
// claim share a hash slot), or another redis.UniversalClient. It fails when cfg is
// invalid, naming the field and what to do. It does not contact Redis: inbox.New does,
// through Verify.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: invalid config: the client is nil: pass a *redis.Client or *redis.ClusterClient")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("redisstore: invalid config: %w", err)
	}
	s := &Store{client: client, cfg: cfg, slots: cfg.CheckSlots, block: maxBlock}
	var readTimeout time.Duration
	switch c := client.(type) {
	case *redis.ClusterClient:
		s.slots = true
		readTimeout = c.Options().ReadTimeout
	case *redis.Client:
		readTimeout = c.Options().ReadTimeout
	}
	if readTimeout > 0 && readTimeout/2 < s.block {
		s.block = max(readTimeout/2, time.Millisecond)
	}
	return s, nil
}

// Claim implements inbox.Store. It sends one pipeline of plain commands (one round trip,
// no script): SET the lease key NX with PX Config.Lease (GET returns a lease held
// already), read the committed key, and bump the fencing counter. A committed key is a
// duplicate; a lease another delivery holds makes it wait, blocked on the key's release
// list, for that delivery to commit or release, or for the lease to expire, at most
// Config.Wait.
func (s *Store) Claim(ctx context.Context, rec inbox.Record) (inbox.Claim, error) {
	k := s.keys(rec.Consumer, rec.Key)
	if err := s.checkTag(k); err != nil {
		return inbox.Claim{}, err
	}
	token := randomToken()
	start := time.Now()
	for waiting := false; ; waiting = true {
		v, err := s.tryClaim(ctx, k, token, waiting)
		if err != nil {
			return s.claimFailed(ctx, rec, k, err)
		}
		switch {
		case v.done:
			return inbox.Claim{Duplicate: true, Fingerprint: v.fingerprint, Output: v.output}, nil
		case v.held == "" || v.held == token: // ours (or ours already: go-redis resent it)
			return inbox.Claim{Tx: s.newTx(rec, k, token, v.fence)}, nil
		}
		if !waiting {
			continue // count ourselves as a waiter, check again, then block
		}
		left := s.cfg.Wait - time.Since(start)
		if left <= 0 {
			return inbox.Claim{}, fmt.Errorf("redisstore: waited %v for the delivery holding the key's lease: %w (raise Config.Wait, or Config.Lease if handlers are slow)",
				s.cfg.Wait, inbox.ErrContended)
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
	ttl                 time.Duration // the held lease's time left
}

// tryClaim sends the claim pipeline. The lease is set before the committed key is read: a
// commit needs the lease, so a key found uncommitted after taking the lease stays so. A
// waiting delivery first counts itself as a waiter, so that a release after this
// pipeline wakes it.
func (s *Store) tryClaim(ctx context.Context, k claimKeys, token string, waiting bool) (verdict, error) {
	claimKey, lease := k.name(kindClaim), k.name(kindLease)
	pipe := s.client.Pipeline()
	if waiting {
		pipe.HIncrBy(ctx, claimKey, "w", 1)
	}
	set := pipe.Do(ctx, "set", lease, token, "nx", "get", "px", ms(s.cfg.Lease))
	done := pipe.HMGet(ctx, claimKey, "t", "f", "o")
	fence := pipe.HIncrBy(ctx, claimKey, "n", 1)
	pipe.Do(ctx, "pexpire", claimKey, ms(s.cfg.Retention), "nx") // a claim never committed expires too
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
	if v.fence, err = fence.Result(); err != nil {
		return v, err
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
func (s *Store) claimFailed(ctx context.Context, rec inbox.Record, k claimKeys, err error) (inbox.Claim, error) {
	if !unreachable(err) {
		return inbox.Claim{}, fmt.Errorf("redisstore: claiming the key: %w", err)
	}
	if !s.cfg.DangerouslyProcessWithoutDedupWhenUnreachable {
		return inbox.Claim{}, fmt.Errorf("redisstore: claiming the key: %w, so the message is not processed: %w", ErrUnreachable, err)
	}
	s.cfg.Logger.Error("redisstore: Redis is unreachable: processing the message WITHOUT deduplication (DangerouslyProcessWithoutDedupWhenUnreachable)",
		err, watermill.LogFields{"consumer": rec.Consumer, "key": rec.Key})
	tx := s.newTx(rec, k, "", 0)
	tx.degraded = true
	return inbox.Claim{Tx: tx}, nil
}

// ClaimIn implements inbox.Store: it returns an error wrapping ErrNoJoin, as Redis has no
// transaction a caller could hand over.
func (s *Store) ClaimIn(context.Context, any, inbox.Record) (inbox.Claim, error) {
	return inbox.Claim{}, fmt.Errorf("redisstore: %w: remove the transaction from the message context (inbox.ContextWithTx)", ErrNoJoin)
}

// StartAttempt implements inbox.Store, with a counter next to the key that expires with
// Config.Retention.
func (s *Store) StartAttempt(ctx context.Context, consumer, key string) (int, error) {
	n, err := s.attempt(ctx, consumer, key, "1")
	if err != nil {
		return 0, fmt.Errorf("redisstore: counting the attempt: %w", err)
	}
	return n, nil
}

// EndAttempt implements inbox.Store.
func (s *Store) EndAttempt(ctx context.Context, consumer, key string) error {
	if _, err := s.attempt(ctx, consumer, key, "0"); err != nil {
		return fmt.Errorf("redisstore: ending the attempt: %w", err)
	}
	return nil
}

func (s *Store) attempt(ctx context.Context, consumer, key, start string) (int, error) {
	k := s.keys(consumer, inbox.StorableKey(key))
	n, err := attemptScript.Run(ctx, s.client, []string{k.name(kindAttempts)}, ms(s.cfg.Retention), start).Int()
	return n, err
}

// Forget implements inbox.Store: it deletes the key (what its commit stored; the fence
// counter stays, so fences keep growing), its attempt count and its lease, if any: a
// delivery in flight then fails to commit (ErrLeaseLost) and its redelivery processes.
func (s *Store) Forget(ctx context.Context, consumer, key string) (bool, error) {
	k := s.keys(consumer, inbox.StorableKey(key))
	pipe := s.client.Pipeline()
	done := pipe.HDel(ctx, k.name(kindClaim), "t", "f", "o", "k")
	pipe.Del(ctx, k.name(kindAttempts))
	pipe.Del(ctx, k.name(kindLease))
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("redisstore: forgetting the key: %w", err)
	}
	return done.Val() > 0, nil
}

// PurgeBatch implements inbox.Store and does nothing: Redis expires keys after
// Config.Retention by itself. It returns 0, so inbox.Purge and PurgeEvery stop at once.
func (s *Store) PurgeBatch(context.Context, time.Time, int) (inbox.Purged, error) {
	return inbox.Purged{}, nil
}

// Verify implements inbox.Store. Redis has no schema: it checks that Redis answers,
// loads the scripts (so that commits run them by SHA, in one round trip) and reads the
// command table the commit checks queued commands against. With
// DangerouslyProcessWithoutDedupWhenUnreachable, an unreachable Redis is logged, not
// returned, so the consumer starts.
func (s *Store) Verify(ctx context.Context) error {
	err := s.forEachPrimary(ctx, func(ctx context.Context, c redis.Cmdable) error {
		for _, script := range []*redis.Script{commitScript, releaseScript, attemptScript, claimBatchScript, commitBatchScript, releaseBatchScript} {
			if err := script.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		_, err = s.commandTable(ctx)
	}
	if err != nil && unreachable(err) && s.cfg.DangerouslyProcessWithoutDedupWhenUnreachable {
		s.cfg.Logger.Error("redisstore: Redis is unreachable at start: messages will be processed WITHOUT deduplication until it is back", err, nil)
		return nil
	}
	if err != nil {
		return fmt.Errorf("redisstore: checking Redis: %w", err)
	}
	return nil
}

// commandTable returns the server's command table, read once.
func (s *Store) commandTable(ctx context.Context) (map[string]*redis.CommandInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commands != nil {
		return s.commands, nil
	}
	cmds, err := s.client.Command(ctx).Result()
	if err != nil {
		return nil, err
	}
	s.commands = cmds
	return cmds, nil
}

// forEachPrimary runs fn on every primary: the client itself unless it is a Cluster or
// a Ring.
func (s *Store) forEachPrimary(ctx context.Context, fn func(ctx context.Context, c redis.Cmdable) error) error {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) })
	}
	return fn(ctx, s.client)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// bulk returns a script's bulk reply as bytes, nil for a nil reply.
func bulk(v any) []byte {
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	return nil
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Config returns the store's configuration, with the defaults applied.
func (s *Store) Config() Config { return s.cfg }
