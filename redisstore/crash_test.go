package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

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
)

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

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashHelperEnv+"=1", crashPrefixEnv+"="+prefix)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child should have been killed; output:\n%s", out)
	status, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, status.Signaled() && status.Signal() == syscall.SIGKILL, "output:\n%s", out)
	require.Contains(t, string(out), crashCommitted, "the child died before its commit")

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
