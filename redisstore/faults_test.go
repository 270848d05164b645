package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

func TestServerRestartKeepsKeys(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--appendonly", "yes", "--appendfsync", "always")
	client := newClient(t, srv.addr())
	store, ib := newStore(t, client, redisstore.Config{})
	counter := store.Config().Prefix + "counter"
	ctx := context.Background()

	dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
	require.NoError(t, err)
	require.False(t, dup)

	srv.kill(t) // a crash: the AOF, fsynced at each write, has the commit
	srv.start(t)

	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 10*time.Second, 20*time.Millisecond)
	dup, err = ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
	require.NoError(t, err)
	require.True(t, dup, "the committed key survived the restart")
	// The restarted server lost its script cache: the scripts are sent again.
	dup, err = ib.Process(ctx, "billing", "order-2", func(ctx context.Context) error { return incr(ctx, counter) })
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, "2", client.Get(ctx, counter).Val())
}

// errorLog records what is logged at error level.
type errorLog struct {
	watermill.NopLogger
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Error(msg string, _ error, _ watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
}

func (l *errorLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.msgs)
}

func TestRedisStoppedMidRun(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	client := newClient(t, srv.addr())
	ctx := context.Background()

	t.Run("FailsClosedThenResumes", func(t *testing.T) {
		store, ib := newStore(t, client, redisstore.Config{})
		counter := store.Config().Prefix + "counter"
		dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
		require.NoError(t, err)
		require.False(t, dup)

		srv.kill(t)
		ran := false
		_, err = ib.Process(ctx, "billing", "order-2", func(context.Context) error { ran = true; return nil })
		require.ErrorIs(t, err, redisstore.ErrUnreachable)
		require.False(t, ran, "never processed without deduplication")

		srv.start(t) // no persistence: a fresh server
		dup, err = ib.Process(ctx, "billing", "order-2", func(ctx context.Context) error { return incr(ctx, counter) })
		require.NoError(t, err)
		require.False(t, dup)
		dup, err = ib.Process(ctx, "billing", "order-2", func(ctx context.Context) error { return incr(ctx, counter) })
		require.NoError(t, err)
		require.True(t, dup)
	})

	t.Run("OptInProcessesWithoutDedupAndLogs", func(t *testing.T) {
		logs := &errorLog{}
		store, ib := newStore(t, client, redisstore.Config{DangerouslyProcessWithoutDedupWhenUnreachable: true, Logger: logs})
		counter := store.Config().Prefix + "counter"
		srv.kill(t)
		defer srv.start(t)

		ran := 0
		for range 2 {
			dup, err := ib.Process(ctx, "billing", "order-3", func(context.Context) error { ran++; return nil })
			require.NoError(t, err)
			require.False(t, dup)
		}
		require.Equal(t, 2, ran, "without deduplication, both deliveries run")
		require.GreaterOrEqual(t, logs.count(), 2, "each one logged at error level")

		_, err := ib.Process(ctx, "billing", "order-4", func(ctx context.Context) error { return incr(ctx, counter) })
		require.Error(t, err, "a Redis write that cannot be applied fails the message")
	})

	t.Run("OptInNeedsALogger", func(t *testing.T) {
		_, err := redisstore.New(client, redisstore.Config{DangerouslyProcessWithoutDedupWhenUnreachable: true})
		require.ErrorContains(t, err, "set Logger")
	})
}

func TestWaitForReplicas(t *testing.T) {
	t.Parallel()
	primary := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", primary.addrPort())
	client := newClient(t, primary.addr())
	ctx := context.Background()
	require.Eventually(t, func() bool {
		info, _ := client.Info(ctx, "replication").Result()
		return strings.Contains(info, "state=online")
	}, 20*time.Second, 50*time.Millisecond)

	store, ib := newStore(t, client, redisstore.Config{Replicas: 1, ReplicaTimeout: 2 * time.Second})
	counter := store.Config().Prefix + "counter"
	dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
	require.NoError(t, err)
	require.False(t, dup)
	replicaClient := newClient(t, replica.addr())
	require.Equal(t, "1", replicaClient.Get(ctx, counter).Val(), "the replica had it before the commit was reported")

	replica.kill(t)
	_, err = ib.Process(ctx, "billing", "order-2", func(ctx context.Context) error { return incr(ctx, counter) })
	require.ErrorIs(t, err, redisstore.ErrNotReplicated)
	dup, err = ib.Process(ctx, "billing", "order-2", func(ctx context.Context) error { return incr(ctx, counter) })
	require.True(t, dup, "applied on the primary: the redelivery is a duplicate")
	require.ErrorIs(t, err, nil)
	require.Equal(t, "2", client.Get(ctx, counter).Val())
}

func TestDedupRepository(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	ctx := context.Background()
	repo, err := redisstore.NewExpiringKeyRepository(client, redisstore.DedupConfig{Window: 300 * time.Millisecond, Prefix: testPrefix(t, client)})
	require.NoError(t, err)
	for _, want := range []bool{false, true, true} {
		dup, err := repo.IsDuplicate(ctx, "msg-1")
		require.NoError(t, err)
		require.Equal(t, want, dup)
	}
	require.Eventually(t, func() bool {
		dup, err := repo.IsDuplicate(ctx, "msg-1")
		return err == nil && !dup
	}, 5*time.Second, 50*time.Millisecond, "the key expires after the window")

	_, err = redisstore.NewExpiringKeyRepository(client, redisstore.DedupConfig{})
	require.ErrorContains(t, err, "Window")

	// Watermill's Deduplicator keeps the key even when the handler fails: the
	// redelivery of a failed message is dropped, unlike the inbox's.
	// Timeout set: Watermill raises a zero Timeout to 5ms, which the repository holds.
	dedup := middleware.Deduplicator{KeyFactory: middleware.NewMessageHasherFromMetadataField("id"), Repository: repo, Timeout: 10 * time.Second}
	calls := 0
	h := dedup.Middleware(func(*message.Message) ([]*message.Message, error) {
		calls++
		return nil, errors.New("handler failed")
	})
	msg := message.NewMessage("uuid-1", nil)
	msg.Metadata.Set("id", "msg-2")
	_, err = h(msg)
	require.Error(t, err)
	_, err = h(msg)
	require.NoError(t, err, "dropped as a duplicate")
	require.Equal(t, 1, calls)
}

// A server that lost its script cache (a restart, SCRIPT FLUSH) gets each script again:
// the claim pipeline, which carries the attempt script with MaxAttempts, is sent again
// once the script is loaded, counting the attempt once.
func TestScriptCacheFlushed(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	client := newClient(t, srv.addr())
	store, err := redisstore.New(client, redisstore.Config{Prefix: testPrefix(t, client)})
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: 1})
	require.NoError(t, err)
	counter := store.Config().Prefix + "counter"
	ctx := context.Background()
	for i, key := range []string{"order-1", "order-2", "order-2"} {
		require.NoError(t, client.ScriptFlush(ctx).Err())
		dup, err := ib.Process(ctx, "billing", key, func(ctx context.Context) error { return incr(ctx, counter) })
		require.NoError(t, err)
		require.Equal(t, i == 2, dup)
	}
	require.NoError(t, client.ScriptFlush(ctx).Err())
	found, err := store.Forget(ctx, "billing", "order-2")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "2", client.Get(ctx, counter).Val())
}
