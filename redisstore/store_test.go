package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

func TestRacingDeliveriesApplyOnce(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	blocks := &blpops{}
	client.AddHook(blocks)
	store, ib := newStore(t, client, redisstore.Config{})
	counter := store.Config().Prefix + "counter"
	ctx := context.Background()

	const deliveries = 16
	var wg sync.WaitGroup
	var ran, dups atomic.Int32
	start := make(chan struct{})
	for range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
				ran.Add(1)
				// The others arrive while it runs: it ends once one of them blocks (on a
				// busy machine they can start later than any fixed sleep), or after 5 s.
				for i := 0; i < 500 && blocks.started.Load() == 0; i++ {
					time.Sleep(10 * time.Millisecond)
				}
				return incr(ctx, counter)
			})
			require.NoError(t, err)
			if dup {
				dups.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, ran.Load(), "one delivery runs the handler")
	require.EqualValues(t, deliveries-1, dups.Load(), "the others wait, then are duplicates")
	n, err := client.Get(ctx, counter).Int()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Positive(t, blocks.woken.Load(), "the waiters blocked")
	require.Zero(t, blocks.timedOut.Load(), "the commit woke every waiter: none waited out its BLPOP")
}

// blpops counts the BLPOPs of waiting duplicates: woken by a release, or timed out.
type blpops struct{ started, woken, timedOut atomic.Int32 }

func (h *blpops) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *blpops) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "blpop" {
			h.started.Add(1)
		}
		err := next(ctx, cmd)
		if cmd.Name() == "blpop" {
			if errors.Is(err, redis.Nil) {
				h.timedOut.Add(1)
			} else if err == nil {
				h.woken.Add(1)
			}
		}
		return err
	}
}
func (h *blpops) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestLeaseExpiredMidHandlerRefusesTheCommit(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	store, ib := newStore(t, client, redisstore.Config{Lease: 300 * time.Millisecond})
	counter := store.Config().Prefix + "counter"
	ctx := context.Background()

	var fences [2]int64
	inHandler, secondDone := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
			tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
			fences[0] = tx.Fence()
			if err := incr(ctx, counter); err != nil {
				return err
			}
			close(inHandler)
			<-secondDone // outlives its lease: the second delivery takes the key
			return nil
		})
		first <- err
	}()
	<-inHandler
	dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
		tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
		fences[1] = tx.Fence()
		return incr(ctx, counter)
	})
	require.NoError(t, err)
	require.False(t, dup, "the first delivery's lease expired: the second processes")
	close(secondDone)
	require.ErrorIs(t, <-first, redisstore.ErrLeaseLost)
	require.Greater(t, fences[1], fences[0], "fencing tokens grow")

	n, err := client.Get(ctx, counter).Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the late commit applied nothing")
	dup, err = ib.Process(ctx, "billing", "order-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.True(t, dup)
}

// roundTrips counts what a client sends to Redis: one per command, one per pipeline. A
// new connection's handshake (HELLO, then a pipeline of CLIENT SETINFO) is go-redis's,
// not the store's, and is left out: go-redis v9.23 dials a second connection on a new
// client's first claim, and its handshake passes through the client's hooks.
type roundTrips struct{ n atomic.Int32 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() != "client" }) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	hook := &roundTrips{}
	client.AddHook(hook)
	store, ib := newStore(t, client, redisstore.Config{}) // New → Verify loads the scripts
	counter := store.Config().Prefix + "counter"
	ctx := context.Background()

	handler := func(ctx context.Context) error {
		if err := incr(ctx, counter); err != nil {
			return err
		}
		tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
		return tx.HSet(ctx, counter+":h", "a", 1, "b", 2).Err()
	}
	hook.n.Store(0)
	dup, err := ib.Process(ctx, "billing", "order-1", handler)
	require.NoError(t, err)
	require.False(t, dup)
	require.EqualValues(t, 2, hook.n.Load(), "a first delivery: the claim and the commit")

	hook.n.Store(0)
	dup, err = ib.Process(ctx, "billing", "order-1", handler)
	require.NoError(t, err)
	require.True(t, dup)
	require.EqualValues(t, 1, hook.n.Load(), "a duplicate: the claim")

	// With MaxAttempts the claim pipeline starts the attempt and the commit ends it.
	counting, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: 3})
	require.NoError(t, err)
	for _, want := range []struct {
		dup   bool
		trips int32
	}{{false, 2}, {true, 1}} {
		hook.n.Store(0)
		dup, err = counting.Process(ctx, "billing", "order-2", handler)
		require.NoError(t, err)
		require.Equal(t, want.dup, dup)
		require.EqualValues(t, want.trips, hook.n.Load(), "MaxAttempts adds no round trip (duplicate: %v)", dup)
	}
}

func TestQueuedCommands(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	ctx := context.Background()

	t.Run("RefusedBeforeAnythingRuns", func(t *testing.T) {
		t.Parallel()
		store, ib := newStore(t, client, redisstore.Config{})
		counter := store.Config().Prefix + "counter"
		for _, bad := range [][]any{{"watch", counter}, {"incr"}, {"nosuchcommand", counter}} {
			_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
				tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
				if err := incr(ctx, counter); err != nil {
					return err
				}
				return tx.Do(ctx, bad...).Err()
			})
			require.ErrorIs(t, err, redisstore.ErrCommandRefused, "%v", bad)
		}
		require.Zero(t, client.Exists(ctx, counter).Val(), "nothing was applied")
		dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
		require.NoError(t, err)
		require.False(t, dup, "the refused commits released the key")
	})

	t.Run("FailedAtRunTimeKeepsTheOthers", func(t *testing.T) {
		t.Parallel()
		store, ib := newStore(t, client, redisstore.Config{})
		text := store.Config().Prefix + "text"
		counter := store.Config().Prefix + "counter"
		require.NoError(t, client.Set(ctx, text, "not a number", 0).Err())
		_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
			if err := incr(ctx, counter); err != nil {
				return err
			}
			return incr(ctx, text)
		})
		require.ErrorIs(t, err, redisstore.ErrCommandFailed)
		require.ErrorContains(t, err, "command 2 (incr)")
		require.Equal(t, "1", client.Get(ctx, counter).Val(), "Redis rolls nothing back")
		dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
		require.NoError(t, err)
		require.True(t, dup, "the key was committed with the others")
	})

	t.Run("PipelinedQueuesAndExecEndsTheTx", func(t *testing.T) {
		t.Parallel()
		store, ib := newStore(t, client, redisstore.Config{})
		counter := store.Config().Prefix + "counter"
		_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
			tx, _ := inbox.TxFromContext[redis.Pipeliner](ctx)
			_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, counter)
				p.IncrBy(ctx, counter, 2)
				return nil
			})
			return err
		})
		require.NoError(t, err)
		require.Equal(t, "3", client.Get(ctx, counter).Val())

		_, err = ib.Process(ctx, "billing", "order-2", func(ctx context.Context) error {
			tx, _ := inbox.TxFromContext[redis.Pipeliner](ctx)
			tx.Incr(ctx, counter)
			_, err := tx.Exec(ctx)
			require.ErrorIs(t, err, inbox.ErrTxDone)
			return nil
		})
		require.ErrorIs(t, err, inbox.ErrTxDone)
		require.Equal(t, "3", client.Get(ctx, counter).Val(), "Exec sent nothing")
	})

	t.Run("CrossSlotKeyIsRefused", func(t *testing.T) {
		t.Parallel()
		store, ib := newStore(t, client, redisstore.Config{CheckSlots: true})
		counter := store.Config().Prefix + "counter"
		var tagged string
		_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
			tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
			tagged = store.Config().Prefix + "balance:" + tx.Tag()
			if err := incr(ctx, tagged); err != nil {
				return err
			}
			return incr(ctx, counter)
		})
		require.ErrorIs(t, err, redisstore.ErrCrossSlot)
		require.ErrorContains(t, err, "command 2 (incr)")
		require.Zero(t, client.Exists(ctx, tagged, counter).Val(), "nothing was applied")

		_, err = ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, tagged) })
		require.NoError(t, err, "a key with the claim's tag is in its slot")
		require.Equal(t, "1", client.Get(ctx, tagged).Val())
	})
}

// A lease that expired while nobody else claimed the key still commits: no other
// delivery applied anything.
func TestExpiredLeaseNotTakenOverCommits(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	store, ib := newStore(t, client, redisstore.Config{Lease: 50 * time.Millisecond})
	counter := store.Config().Prefix + "counter"
	ctx := context.Background()
	_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
		time.Sleep(200 * time.Millisecond)
		return incr(ctx, counter)
	})
	require.NoError(t, err)
	require.Equal(t, "1", client.Get(ctx, counter).Val())
	dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
	require.NoError(t, err)
	require.True(t, dup)
}
