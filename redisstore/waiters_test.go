package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/redisstore"
)

// A waiting duplicate whose BLPOP times out (the holder's handler is slow) claims and
// blocks again: it must count as one waiter however often it loops, or each release
// pushes wake-ups for waiters that are not there, which wake later waiters for nothing.
func TestWaitingDuplicateCountsOnce(t *testing.T) {
	t.Parallel()
	sharedClient(t)
	// A short read timeout makes the store block 200ms at a time.
	client := redis.NewClient(&redis.Options{Addr: sharedAddr(), ReadTimeout: 400 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	blocks := &blpops{}
	client.AddHook(blocks)
	store, ib := newStore(t, client, redisstore.Config{HashTag: func(string, string) string { return "t" }})
	release := store.Config().Prefix + "r:{t}:7:billing:order-1"
	ctx := context.Background()

	inHandler, commit := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error {
			close(inHandler)
			<-commit
			return nil
		})
		first <- err
	}()
	<-inHandler
	waiter := make(chan bool, 1)
	go func() {
		dup, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error { return nil })
		require.NoError(t, err)
		waiter <- dup
	}()
	require.Eventually(t, func() bool { return blocks.timedOut.Load() >= 3 }, 10*time.Second, time.Millisecond, "the waiter looped")
	close(commit)
	require.NoError(t, <-first)
	require.True(t, <-waiter)
	require.Zero(t, client.LLen(ctx, release).Val(), "the commit woke the one waiter there was, once")
}
