package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// Tests run against the shared Redis (INBOX_REDIS_ADDR, default 127.0.0.1:6379), each
// under a key prefix of its own, and, for the cases that stop, restart or replicate a
// server or need a Cluster, against redis-server processes of their own on free
// loopback ports. Outside CI an unreachable Redis skips; under CI (CI=true) it fails.

func unavailable(t testing.TB, what, variable string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable (set %s): %v", what, variable, err)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func sharedAddr() string {
	if addr := os.Getenv("INBOX_REDIS_ADDR"); addr != "" {
		return addr
	}
	return "127.0.0.1:6379"
}

// newClient returns a client of addr, closed when the test ends.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 40, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// sharedClient returns a client of the shared Redis.
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	client := newClient(t, sharedAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		unavailable(t, "Redis", "INBOX_REDIS_ADDR", err)
	}
	return client
}

// testPrefix returns a key prefix of the test's own; its keys are deleted when the test
// ends.
func testPrefix(t testing.TB, client redis.UniversalClient) string {
	prefix := fmt.Sprintf("test:%d%08x:", time.Now().UnixNano()%1e6, rand.Uint32())
	t.Cleanup(func() {
		ctx := context.Background()
		del := func(ctx context.Context, c redis.Cmdable) error {
			iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			return nil
		}
		if cc, ok := client.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return del(ctx, c) })
			return
		}
		_ = del(ctx, client)
	})
	return prefix
}

// newStore returns a store under a fresh prefix and an inbox over it, verified.
func newStore(t testing.TB, client redis.UniversalClient, cfg redisstore.Config) (*redisstore.Store, *inbox.Inbox) {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix(t, client)
	}
	store, err := redisstore.New(client, cfg)
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.NoError(t, err)
	return store, ib
}

// incr queues INCR key in the inbox transaction of ctx.
func incr(ctx context.Context, key string) error {
	tx, ok := inbox.TxFromContext[*redisstore.Tx](ctx)
	if !ok {
		return fmt.Errorf("no *redisstore.Tx in the context")
	}
	return tx.Incr(ctx, key).Err()
}

// server is a redis-server process of the test's own.
type server struct {
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// startServer starts redis-server on a free loopback port, with a data directory of its
// own and extra arguments, killed when the test ends.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		unavailable(t, "redis-server", "PATH", err)
	}
	s := &server{port: freePort(t), dir: t.TempDir(), args: extra}
	s.start(t)
	t.Cleanup(func() { s.kill(t) })
	return s
}

func (s *server) start(t testing.TB) {
	t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--logfile", "redis.log"}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	require.NoError(t, s.cmd.Start())
	client := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer client.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if err := client.Ping(context.Background()).Err(); err == nil {
			return
		} else if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.dir + "/redis.log")
			t.Fatalf("redis-server on %s did not start: %v\n%s", s.addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill SIGKILLs the server, as a crash or an OOM kill would.
func (s *server) kill(t testing.TB) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// freePort returns a loopback port nothing listens on, nor on port+10000 (a Cluster bus).
func freePort(t testing.TB) int {
	t.Helper()
	port, err := findFreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func findFreePort() (int, error) {
	for range 100 {
		port := 20000 + rand.IntN(30000)
		ok := true
		for _, p := range []int{port, port + 10000} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port")
}

func (s *server) addrPort() string { return strconv.Itoa(s.port) }
