package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// A commit whose connection breaks after the script ran is resent by go-redis: the
// resend must report what the first run did, the commands that failed included, or
// ErrCommandFailed is lost and a failed effect passes for applied.
func TestResentCommitKeepsTheFailedCommands(t *testing.T) {
	t.Parallel()
	b := &breaker{}
	client := breakerClient(t, b, nil)
	store, ib := newStore(t, client, redisstore.Config{})
	text, counter := store.Config().Prefix+"text", store.Config().Prefix+"counter"
	ctx := context.Background()
	require.NoError(t, client.Set(ctx, text, "not a number", 0).Err())

	b.breakNext(1, named("evalsha")) // the commit script: the only script of a delivery without MaxAttempts
	_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
		if err := incr(ctx, counter); err != nil {
			return err
		}
		return incr(ctx, text)
	})
	require.EqualValues(t, 1, b.broken.Load(), "the commit's connection broke after the script ran")
	require.ErrorIs(t, err, redisstore.ErrCommandFailed)
	require.ErrorContains(t, err, "command 2 (incr)")
	require.Equal(t, "1", client.Get(ctx, counter).Val(), "applied once")
}

// A Forget whose connection breaks after it ran is resent: it still reports the key it
// deleted.
func TestResentForgetGivesTheFirstAnswer(t *testing.T) {
	t.Parallel()
	b := &breaker{}
	client := breakerClient(t, b, nil)
	store, ib := newStore(t, client, redisstore.Config{})
	ctx := context.Background()
	_, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error { return nil })
	require.NoError(t, err)

	b.breakNext(1, naming(store.Config().Prefix))
	found, err := store.Forget(ctx, "billing", "order-1")
	require.NoError(t, err)
	require.EqualValues(t, 1, b.broken.Load())
	require.True(t, found, "the resent Forget reports the key the first run deleted")
	dup, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.False(t, dup)
}

// Every round trip the store makes, in the life of a message, is broken in turn after the
// server ran it: go-redis resends it, and what the caller sees, and what Redis holds,
// must be what a run without a fault gives.
func TestEveryRoundTripIsSafeToResend(t *testing.T) {
	t.Parallel()
	scenarios := []struct {
		name string
		run  func(t *testing.T, env resendEnv) []any
	}{
		{"FailThenCommitThenDuplicate", func(t *testing.T, env resendEnv) []any {
			var seen []any
			for _, fail := range []bool{true, false, false} {
				dup, err := env.ib.Process(env.ctx, "billing", "order-1", func(ctx context.Context) error {
					if err := incr(ctx, env.counter); err != nil {
						return err
					}
					if fail {
						return errCleanFailure
					}
					return nil
				})
				seen = append(seen, dup, errorsIs(err, errCleanFailure))
			}
			return append(seen, env.client.Get(env.ctx, env.counter).Val())
		}},
		{"CommandFailedAtCommit", func(t *testing.T, env resendEnv) []any {
			require.NoError(t, env.client.Set(env.ctx, env.counter+":text", "x", 0).Err())
			dup, err := env.ib.Process(env.ctx, "billing", "order-1", func(ctx context.Context) error {
				_ = incr(ctx, env.counter)
				return incr(ctx, env.counter+":text")
			})
			again, err2 := env.ib.Process(env.ctx, "billing", "order-1", func(context.Context) error { return nil })
			return []any{dup, errorsIs(err, redisstore.ErrCommandFailed), again, err2, env.client.Get(env.ctx, env.counter).Val()}
		}},
		{"ForgetThenProcessAgain", func(t *testing.T, env resendEnv) []any {
			var seen []any
			for range 2 {
				dup, err := env.ib.Process(env.ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, env.counter) })
				found, ferr := env.store.Forget(env.ctx, "billing", "order-1")
				seen = append(seen, dup, err, found, ferr)
			}
			stats, err := env.store.Stats(env.ctx)
			return append(seen, len(stats), err, env.client.Get(env.ctx, env.counter).Val())
		}},
		{"DedupCheck", func(t *testing.T, env resendEnv) []any {
			repo, err := redisstore.NewExpiringKeyRepository(env.client, redisstore.DedupConfig{Window: time.Minute, Prefix: env.prefix})
			require.NoError(t, err)
			var seen []any
			for _, key := range []string{"m-1", "m-1", "m-2"} {
				dup, err := repo.IsDuplicate(env.ctx, key)
				seen = append(seen, dup, err)
			}
			return seen
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			clean := &breaker{}
			want := sc.run(t, newResendEnv(t, clean))
			trips := int(clean.writes.Load())
			require.Positive(t, trips)
			t.Logf("%d round trips, each broken in turn", trips)
			for n := 1; n <= trips; n++ {
				b := &breaker{}
				env := newResendEnv(t, b)
				b.breakNth(n)
				got := sc.run(t, env)
				require.EqualValues(t, 1, b.broken.Load(), "round trip %d of %d broke once", n, trips)
				require.Equal(t, want, got, "round trip %d of %d broken and resent", n, trips)
			}
		})
	}
}

// resendEnv is a store, an inbox (MaxAttempts 2) and one for batches on a client whose connections a
// breaker breaks, under a prefix of their own.
type resendEnv struct {
	ctx     context.Context
	client  *redis.Client
	store   *redisstore.Store
	ib      *inbox.Inbox
	batches *inbox.Inbox // the same store without MaxAttempts, for batches
	prefix  string
	counter string
}

func newResendEnv(t *testing.T, b *breaker) resendEnv {
	client := breakerClient(t, b, nil)
	prefix := testPrefix(t, client)
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: 2})
	require.NoError(t, err)
	batches, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.NoError(t, err)
	b.writes.Store(0) // Verify's round trips are not the message's
	return resendEnv{ctx: context.Background(), client: client, store: store, ib: ib, batches: batches, prefix: prefix, counter: prefix + "counter"}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// A message processed without a claim (DangerouslyProcessWithoutDedupWhenUnreachable:
// Redis was unreachable at the claim, and is back at the commit) is committed by the
// same script as any other: a resent commit gives the first run's answer, and a commit
// after another delivery committed the key applies nothing.
func TestCommitWithoutAClaim(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*breaker, *redis.Client, *inbox.Inbox, string, func(key string, inHandler func()) (bool, error)) {
		b := &breaker{}
		client := breakerClient(t, b, nil)
		store, err := redisstore.New(client, redisstore.Config{Prefix: testPrefix(t, client),
			DangerouslyProcessWithoutDedupWhenUnreachable: true, Logger: &errorLog{}})
		require.NoError(t, err)
		ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
		require.NoError(t, err)
		counter := store.Config().Prefix + "counter"
		unreachableAtClaim := func(key string, inHandler func()) (bool, error) {
			b.down.Store(true)
			return ib.Process(context.Background(), "billing", key, func(ctx context.Context) error {
				b.down.Store(false) // back for the commit
				inHandler()
				return incr(ctx, counter)
			})
		}
		return b, client, ib, counter, unreachableAtClaim
	}
	ctx := context.Background()

	t.Run("ResentCommitGivesTheFirstAnswer", func(t *testing.T) {
		t.Parallel()
		b, client, ib, counter, unreachableAtClaim := setup(t)
		b.breakNext(1, naming(counter)) // the commit, which carries the handler's INCR
		dup, err := unreachableAtClaim("order-1", func() {})
		require.NoError(t, err)
		require.False(t, dup)
		require.EqualValues(t, 1, b.broken.Load(), "the commit's connection broke after the script ran")
		require.Equal(t, "1", client.Get(ctx, counter).Val(), "the resent commit applied nothing more")
		dup, err = ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
		require.NoError(t, err)
		require.True(t, dup, "the key was stored with the commands")
	})

	t.Run("KeyCommittedMeanwhileAppliesNothing", func(t *testing.T) {
		t.Parallel()
		_, client, ib, counter, unreachableAtClaim := setup(t)
		_, err := unreachableAtClaim("order-2", func() {
			dup, err := ib.Process(ctx, "billing", "order-2", func(ctx context.Context) error { return incr(ctx, counter) })
			require.NoError(t, err)
			require.False(t, dup, "another delivery, with a claim, processes the message")
		})
		require.ErrorIs(t, err, redisstore.ErrLeaseLost, "the commit without a claim finds the key committed")
		require.Equal(t, "1", client.Get(ctx, counter).Val(), "and applies nothing")
	})
}
