package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// A Redis Cluster of 3 primaries: INBOX_REDIS_CLUSTER's (.ci/run starts it with
// scripts/redis-cluster.sh), or one on free loopback ports, started once for the test
// binary by the first test that needs it and stopped by TestMain.
var cluster struct {
	once    sync.Once
	servers []*server
	addrs   []string
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range cluster.servers {
		if s.cmd != nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
		_ = os.RemoveAll(s.dir)
	}
	os.Exit(code)
}

// clusterClient returns a client of the test Cluster, starting it if needed.
func clusterClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		unavailable(t, "redis-cli", "PATH", err)
	}
	cluster.once.Do(func() {
		if addrs := os.Getenv("INBOX_REDIS_CLUSTER"); addrs != "" { // scripts/redis-cluster.sh
			cluster.addrs = strings.Split(addrs, ",")
			return
		}
		cluster.err = startCluster()
	})
	require.NoError(t, cluster.err)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.addrs, PoolSize: 40})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func startCluster() (err error) {
	for range 3 {
		dir, err := os.MkdirTemp("", "redisstore-cluster-")
		if err != nil {
			return err
		}
		port, err := findFreePort()
		if err != nil {
			return err
		}
		s := &server{port: port, dir: dir,
			args: []string{"--cluster-enabled", "yes", "--cluster-config-file", dir + "/nodes.conf", "--appendonly", "no"}}
		s.cmd = exec.Command("redis-server", append([]string{"--port", fmt.Sprint(s.port), "--bind", "127.0.0.1",
			"--dir", s.dir, "--save", "", "--logfile", "redis.log"}, s.args...)...)
		if err := s.cmd.Start(); err != nil {
			return err
		}
		cluster.servers = append(cluster.servers, s)
		cluster.addrs = append(cluster.addrs, s.addr())
	}
	ctx := context.Background()
	for _, addr := range cluster.addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		for deadline := time.Now().Add(20 * time.Second); c.Ping(ctx).Err() != nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster node %s did not start", addr)
			}
		}
		_ = c.Close()
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, cluster.addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range cluster.addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster node %s not ok: %s", addr, info)
			}
		}
		_ = c.Close()
	}
	return nil
}

func TestCluster(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	ctx := context.Background()

	t.Run("SlotMatchesTheServer", func(t *testing.T) {
		for _, key := range []string{"a", "inbox:d:{7:billing:order-1}:x", "{}x", "x{}{y}", "{user1000}.following", "é\xff", "foo{bar", "foo{bar}"} {
			want, err := client.ClusterKeySlot(ctx, key).Result()
			require.NoError(t, err)
			require.EqualValues(t, want, redisstore.Slot(key), "key %q", key)
		}
	})

	t.Run("FirstDeliveryDuplicateAndRace", func(t *testing.T) {
		t.Parallel()
		store, ib := newStore(t, client, redisstore.Config{})
		for i := range 20 { // keys spread over the three primaries
			key := fmt.Sprint("order-", i)
			var ran atomic.Int32
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := ib.Process(ctx, "billing", key, func(ctx context.Context) error {
						ran.Add(1)
						tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
						return tx.Incr(ctx, store.Config().Prefix+"count:"+tx.Tag()).Err()
					})
					require.NoError(t, err)
				}()
			}
			wg.Wait()
			require.EqualValues(t, 1, ran.Load(), "key %s", key)
		}
		stats, err := store.Stats(ctx)
		require.NoError(t, err)
		require.Len(t, stats, 1)
		require.EqualValues(t, 20, stats[0].Keys, "SCAN on every primary")
	})

	t.Run("HandlerKeyOutsideTheSlotIsRefused", func(t *testing.T) {
		t.Parallel()
		store, ib := newStore(t, client, redisstore.Config{})
		other := store.Config().Prefix + "balance:{alice}"
		_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
			tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
			return tx.MSet(ctx, store.Config().Prefix+"ok:"+tx.Tag(), 1, other, 1).Err()
		})
		require.ErrorIs(t, err, redisstore.ErrCrossSlot, "MSET's second key is checked too")
		require.ErrorContains(t, err, "balance:{alice}")
		require.Zero(t, client.Exists(ctx, other).Val())
	})

	t.Run("Subcommands", func(t *testing.T) {
		t.Parallel()
		exerciseSubcommands(t, client, redisstore.Config{})
	})

	t.Run("HashTagPutsTheInboxInTheHandlersSlot", func(t *testing.T) {
		t.Parallel()
		account := func(_, key string) string { return strings.SplitN(key, "/", 2)[0] }
		store, ib := newStore(t, client, redisstore.Config{HashTag: account})
		balance := store.Config().Prefix + "balance:{alice}"
		for _, key := range []string{"alice/order-1", "alice/order-2", "alice/order-1"} {
			_, err := ib.Process(ctx, "billing", key, func(ctx context.Context) error {
				tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
				return tx.IncrBy(ctx, balance, 190).Err()
			})
			require.NoError(t, err)
		}
		require.Equal(t, "380", client.Get(ctx, balance).Val())
	})
}
