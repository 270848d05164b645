package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// The crash helper runs in a child process (the test binary re-executed): it handles one
// message through the inbox, which commits, and SIGKILLs itself before the router could
// ack, as an OOM kill between the commit and the ack would.
const (
	crashHelperEnv = "REDISSTORE_CRASH_HELPER"
	crashPrefixEnv = "REDISSTORE_CRASH_PREFIX"
	crashCommitted = "crash helper: committed, killing myself before the ack"

	midHandlerEnv  = "REDISSTORE_MID_HANDLER_HELPER"
	midHandlerLine = "crash helper: in the handler, killing myself"
	midLease       = 500 * time.Millisecond
	midMaxAttempts = 3
)

// TestMidHandlerHelperProcess is the child of TestKilledMidHandler: its handler makes an
// effect outside Redis (a plain INCR, as an HTTP call would be), queues one in the inbox
// transaction, and SIGKILLs its process before returning.
func TestMidHandlerHelperProcess(t *testing.T) {
	if os.Getenv(midHandlerEnv) != "1" {
		return // not the child
	}
	client := redis.NewClient(&redis.Options{Addr: sharedAddr()})
	prefix := os.Getenv(crashPrefixEnv)
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix, Lease: midLease})
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "crashy", MaxAttempts: midMaxAttempts})
	require.NoError(t, err)
	h := ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
		client.Incr(m.Context(), prefix+"outside")
		tx, _ := inbox.TxFromContext[*redisstore.Tx](m.Context())
		tx.Incr(m.Context(), prefix+"inside")
		fmt.Fprintln(os.Stdout, midHandlerLine)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	})
	_, err = h(message.NewMessage("msg-1", []byte("payload")))
	t.Fatalf("the handler returned (%v) instead of killing the process", err)
}

// runChild runs the test binary as the named helper and checks it died of SIGKILL after
// printing line.
func runChild(t *testing.T, test, env, prefix, line string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"=1", crashPrefixEnv+"="+prefix)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child should have been killed; output:\n%s", out)
	status, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, status.Signaled() && status.Signal() == syscall.SIGKILL, "output:\n%s", out)
	require.Contains(t, string(out), line, "the child died too early")
}

// A process killed mid-handler: its queued Redis writes are lost with it, its effect
// outside Redis is not; once the lease expires the redelivery processes the message, so
// the outside effect happens twice and the Redis one once. After MaxAttempts such
// crashes, the message is refused as poison.
func TestKilledMidHandler(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	prefix := testPrefix(t, client)
	ctx := context.Background()
	runChild(t, "TestMidHandlerHelperProcess", midHandlerEnv, prefix, midHandlerLine)
	require.Equal(t, "1", client.Get(ctx, prefix+"outside").Val())
	require.Zero(t, client.Exists(ctx, prefix+"inside").Val(), "the queued write died with the process")

	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix, Lease: midLease})
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "crashy"})
	require.NoError(t, err)
	_, err = ib.Process(ctx, "crashy", "msg-1", func(ctx context.Context) error {
		client.Incr(ctx, prefix+"outside")
		tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
		return tx.Incr(ctx, prefix+"inside").Err()
	})
	require.NoError(t, err, "the redelivery waited for the dead holder's lease, then processed")
	require.Equal(t, "2", client.Get(ctx, prefix+"outside").Val(), "effects outside Redis happen again")
	require.Equal(t, "1", client.Get(ctx, prefix+"inside").Val(), "effects in Redis happen once")

	poisoned := testPrefix(t, client)
	for range midMaxAttempts {
		runChild(t, "TestMidHandlerHelperProcess", midHandlerEnv, poisoned, midHandlerLine)
	}
	poisonStore, err := redisstore.New(client, redisstore.Config{Prefix: poisoned, Lease: midLease})
	require.NoError(t, err)
	poisonIb, err := inbox.New(inbox.Config{Store: poisonStore, Consumer: "crashy", MaxAttempts: midMaxAttempts})
	require.NoError(t, err)
	_, err = poisonIb.Process(ctx, "crashy", "msg-1", func(context.Context) error {
		t.Fatal("a poisoned message must not reach its handler")
		return nil
	})
	require.ErrorIs(t, err, inbox.ErrTooManyAttempts)
}

func TestCrashHelperProcess(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "1" {
		return // not the child
	}
	client := redis.NewClient(&redis.Options{Addr: sharedAddr()})
	prefix := os.Getenv(crashPrefixEnv)
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "crashy"})
	require.NoError(t, err)
	h := ib.Middleware(creditHandler(prefix))
	_, err = h(message.NewMessage("msg-1", []byte("payload")))
	require.NoError(t, err)
	fmt.Fprintln(os.Stdout, crashCommitted)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func creditHandler(prefix string) message.HandlerFunc {
	return func(m *message.Message) ([]*message.Message, error) {
		tx, ok := inbox.TxFromContext[*redisstore.Tx](m.Context())
		if !ok {
			return nil, fmt.Errorf("no *redisstore.Tx in the context")
		}
		if err := tx.IncrBy(m.Context(), prefix+"balance", 100).Err(); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage("receipt-"+m.UUID, []byte("credited"))}, nil
	}
}

func TestKilledAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	prefix := testPrefix(t, client)

	runChild(t, "TestCrashHelperProcess", crashHelperEnv, prefix, crashCommitted)

	// The broker redelivers the unacked message to another consumer.
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "crashy"})
	require.NoError(t, err)
	calls := 0
	inner := creditHandler(prefix)
	replayed, err := ib.Middleware(func(m *message.Message) ([]*message.Message, error) { calls++; return inner(m) })(
		message.NewMessage("msg-1", []byte("payload")))
	require.NoError(t, err)
	require.Zero(t, calls, "the redelivery is a duplicate")
	require.Len(t, replayed, 1, "the output stored with the key is replayed")
	require.Equal(t, "receipt-msg-1", replayed[0].UUID)
	require.Equal(t, "100", client.Get(context.Background(), prefix+"balance").Val(), "applied once")
}
