package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox/internal/contract"
)

var (
	//go:embed lua/commit.lua
	commitLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/start.lua
	startLua string
	//go:embed lua/forget.lua
	forgetLua string
	//go:embed lua/end.lua
	endLua string

	commitScript  = redis.NewScript(commitLua)
	releaseScript = redis.NewScript(releaseLua)
	startScript   = redis.NewScript(startLua)
	forgetScript  = redis.NewScript(forgetLua)
	endScript     = redis.NewScript(endLua)
	scripts       = []*redis.Script{commitScript, releaseScript, startScript, forgetScript, endScript, claimBatchScript, commitBatchScript, releaseBatchScript}
)

// anyGeneration, as the generation a commit passes, skips the check for a Forget since
// the claim: a message processed without a claim (Redis unreachable) read none.
const anyGeneration = "*"

// maxBlock bounds one BLPOP of a waiting duplicate, below go-redis's default 3s read
// timeout (a BLPOP sent with Process gets no longer read deadline); the wait then goes
// on with another claim attempt and another BLPOP.
const maxBlock = time.Second

// Store is an inbox.Store on Redis: see the package doc.
//
// Your methods: Forget, Stats and Config; keys expire by themselves (there is nothing to
// purge, nor a schema to create). The others (Claim, ClaimIn, PurgeBatch, Verify and the
// attempt methods) are the rest of inbox.Store, the contract between the inbox and its
// stores: the inbox calls them, not you.
type Store struct {
	client redis.UniversalClient
	cfg    Config
	slots  bool // check the handler's keys' slots at commit
	block  time.Duration

	mu       sync.Mutex
	commands commandTable // from COMMAND, for checking queued commands
}

var _ contract.Store = (*Store)(nil)

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

// ClaimIn implements inbox.Store: it returns an error wrapping ErrNoJoin, as Redis has no
// transaction a caller could hand over.
func (s *Store) ClaimIn(context.Context, any, contract.Record) (contract.Claim, error) {
	return contract.Claim{}, fmt.Errorf("redisstore: %w: remove the transaction from the message context (inbox.ContextWithTx)", ErrNoJoin)
}

// EndAttempt implements inbox.Store: it removes the attempt's token from the key's
// started attempts and, if the attempt still holds the key's lease (a claim whose reply
// was lost), drops it and wakes the waiters. A resend, or the end of an attempt never
// recorded, changes nothing. Tx.Commit ends every attempt of the key, and Tx.Rollback
// its own.
func (s *Store) EndAttempt(ctx context.Context, rec contract.Record) error {
	k := s.keys(rec.Consumer, rec.Key) // the key as Claim got it
	err := endScript.Run(ctx, s.client, []string{k.name(kindAttempts), k.name(kindLease), k.name(kindWaiters), k.name(kindRelease)},
		rec.Attempt, ms(s.cfg.Lease)).Err()
	if err != nil {
		return fmt.Errorf("redisstore: ending the attempt: %w", err)
	}
	return nil
}

// Forget implements inbox.Store: one script deletes the key (what its commit stored; the
// fence counter stays, so fences keep growing), its started attempts and its lease, and
// records the Forget as the claim's generation. A delivery in flight, which claimed
// before the Forget, then fails to commit (ErrLeaseLost, nothing applied) and its
// redelivery processes the message: a Forget is never undone by a commit that started
// before it. A resent Forget returns the first run's answer.
func (s *Store) Forget(ctx context.Context, consumer, key string) (bool, error) {
	k := s.keys(consumer, contract.StorableKey(key))
	found, err := forgetScript.Run(ctx, s.client,
		[]string{k.name(kindClaim), k.name(kindLease), k.name(kindAttempts), k.name(kindWaiters), k.name(kindRelease)},
		randomToken(), ms(s.cfg.Retention), ms(s.cfg.Lease)).Int()
	if err != nil {
		return false, fmt.Errorf("redisstore: forgetting the key: %w", err)
	}
	return found == 1, nil
}

// Verify implements inbox.Store. Redis has no schema: it checks that Redis answers,
// loads the scripts (so that commits run them by SHA, in one round trip) and reads the
// command table the commit checks queued commands against. With
// DangerouslyProcessWithoutDedupWhenUnreachable, an unreachable Redis is logged, not
// returned, so the consumer starts.
func (s *Store) Verify(ctx context.Context) error {
	err := s.forEachPrimary(ctx, func(ctx context.Context, c redis.Cmdable) error {
		for _, script := range scripts {
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
