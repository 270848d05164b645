package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// Attempts (inbox.Config.MaxAttempts) count deliveries that held the key and died: not
// duplicates, not waiters, not clean failures, not resends.

var errCleanFailure = errors.New("the handler failed cleanly")

// newCountingStore returns a store whose every claim has the hash tag "t", and an inbox
// with MaxAttempts over it.
func newCountingStore(t *testing.T, client redis.UniversalClient, cfg redisstore.Config, maxAttempts int) (*redisstore.Store, *inbox.Inbox) {
	t.Helper()
	cfg.Prefix = testPrefix(t, client)
	cfg.HashTag = func(string, string) string { return "t" }
	store, err := redisstore.New(client, cfg)
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: maxAttempts})
	require.NoError(t, err)
	return store, ib
}

// A duplicate and a commit end their attempts, and nothing of them outlives the key: once
// the key expired (Retention), the next delivery processes the message.
func TestAttemptsDoNotOutliveTheKey(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	const retention = 2 * time.Second
	store, ib := newCountingStore(t, client, redisstore.Config{Lease: 100 * time.Millisecond, Retention: retention}, 2)
	counter := store.Config().Prefix + "counter"
	claimKey := store.Config().Prefix + "c:{t}:7:billing:order-1"
	ctx := context.Background()
	process := func() (bool, error) {
		return ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
	}

	dup, err := process()
	require.NoError(t, err)
	require.False(t, dup)
	// Duplicates late in the key's life: anything they start would outlive it.
	require.Eventually(t, func() bool { return client.PTTL(ctx, claimKey).Val() < retention/2 }, 10*time.Second, 10*time.Millisecond)
	for range 3 {
		dup, err := process()
		require.NoError(t, err)
		require.True(t, dup)
	}
	require.Eventually(t, func() bool { return client.Exists(ctx, claimKey).Val() == 0 }, 10*time.Second, 10*time.Millisecond, "the key expires")

	dup, err = process()
	require.NoError(t, err, "the message is new again, not poison")
	require.False(t, dup)
	require.Equal(t, "2", client.Get(ctx, counter).Val())
}

// Concurrent duplicates that each fail cleanly are not crashes: with MaxAttempts 1 none is
// refused, whatever order they hold the key in.
func TestAttemptsOfConcurrentDuplicatesAreNotCrashes(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	waiters := &blpopsSent{}
	client.AddHook(waiters)
	_, ib := newCountingStore(t, client, redisstore.Config{}, 1)
	ctx := context.Background()

	const deliveries = 4
	firstIn, releaseFirst := make(chan struct{}), make(chan struct{})
	var holders atomic.Int32
	handler := func(context.Context) error {
		if holders.Add(1) == 1 {
			close(firstIn)
			<-releaseFirst // the others arrive and wait while the first holds the key
		}
		return errCleanFailure
	}
	errs := make([]error, deliveries)
	var wg sync.WaitGroup
	for i := range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i > 0 {
				<-firstIn
			}
			_, errs[i] = ib.Process(ctx, "billing", "order-1", handler)
		}()
	}
	<-firstIn
	require.Eventually(t, func() bool { return waiters.n.Load() >= deliveries-1 }, 10*time.Second, time.Millisecond, "the others wait on the key")
	close(releaseFirst)
	wg.Wait()
	for i, err := range errs {
		require.ErrorIs(t, err, errCleanFailure, "delivery %d", i)
		require.NotErrorIs(t, err, inbox.ErrTooManyAttempts, "delivery %d", i)
	}
	require.EqualValues(t, deliveries, holders.Load(), "each delivery ran the handler once it held the key")
}

// blpopsSent counts the BLPOPs sent by waiting duplicates.
type blpopsSent struct{ n atomic.Int32 }

func (h *blpopsSent) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *blpopsSent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "blpop" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *blpopsSent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A connection broken after the server recorded an attempt's start (the claim), or its
// end (the rollback), makes go-redis resend it: the resend counts once. With
// MaxAttempts 2, two cleanly failing deliveries, each with a broken connection at one
// step, leave the third delivery processed.
func TestAttemptsCountResendsOnce(t *testing.T) {
	t.Parallel()
	for step := 1; step <= 2; step++ { // a failing delivery's round trips: the claim, the rollback
		t.Run(fmt.Sprint("BreakStep", step), func(t *testing.T) {
			t.Parallel()
			b := &breaker{}
			client := breakerClient(t, b, nil)
			store, ib := newCountingStore(t, client, redisstore.Config{}, 2)
			counter := store.Config().Prefix + "counter"
			ctx := context.Background()
			for range 2 {
				b.breakNth(step)
				_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
					if err := incr(ctx, counter); err != nil {
						return err
					}
					return errCleanFailure
				})
				require.ErrorIs(t, err, errCleanFailure)
			}
			dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
			require.NoError(t, err, "the third delivery is processed, not refused")
			require.False(t, dup)
			require.Equal(t, "1", client.Get(ctx, counter).Val())
			require.Positive(t, b.broken.Load())
		})
	}
}
