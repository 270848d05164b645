package inbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
	"github.com/watermill-inbox/inbox/redisstore"
)

// The Redis flavour of the conformance suite: a redisstore.Store on the test Redis,
// under a key prefix of its own, whose keys are deleted when the test ends. It has no
// transaction to join, nothing to purge, no schema, and a handler cannot commit its
// handle (see the redisstore package doc).

func redisFlavour() storeFlavour {
	return storeFlavour{
		name: "redis",
		caps: caps{noJoin: true, noPurge: true, noSchema: true, noSession: true, handlerCannotCommit: true, noNeighbours: true, noAttemptCount: true, noOffsets: true},
		open: func(t *testing.T, opts storeOpts) fixture {
			nf := newNetFaults(opts, netfault.RESP)
			client := redisClientDial(t, nf.dial())
			prefix := redisPrefix(t, client)
			store, err := redisstore.New(client, redisstore.Config{Prefix: prefix, Wait: opts.lockTimeout})
			require.NoError(t, err)
			nf.forRedis(t, client, prefix)
			return fixture{store: store, ledger: redisLedger{client: client, key: prefix + "ledger"}, faults: nf,
				peer: func(*testing.T) inbox.Store { return store }}
		},
	}
}

// redisClusterFlavour runs the suite on a Redis Cluster (INBOX_REDIS_CLUSTER, which
// .ci/run sets after scripts/redis-cluster.sh). The ledger is one list shared by every
// claim, so the store's HashTag puts every claim of the test in the ledger's slot, as a
// user's HashTag puts an account's messages in its keys' slot; the commit checks it.
func redisClusterFlavour() storeFlavour {
	return storeFlavour{
		name: "redis-cluster",
		caps: caps{noJoin: true, noPurge: true, noSchema: true, noSession: true, handlerCannotCommit: true, noNeighbours: true, noAttemptCount: true, noOffsets: true},
		open: func(t *testing.T, opts storeOpts) fixture {
			addrs := os.Getenv("INBOX_REDIS_CLUSTER")
			if addrs == "" {
				unavailable(t, "Redis Cluster", "INBOX_REDIS_CLUSTER (scripts/redis-cluster.sh starts one on 127.0.0.1:7101-7103)", fmt.Errorf("not set"))
			}
			nf := newNetFaults(opts, netfault.RESP)
			// Every node's connections dial through the injector, at the addresses the
			// cluster gives (CLUSTER SLOTS).
			client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), PoolSize: 32, Dialer: nf.dial()})
			t.Cleanup(func() { _ = client.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := client.Ping(ctx).Err(); err != nil {
				unavailable(t, "Redis Cluster", "INBOX_REDIS_CLUSTER", err)
			}
			prefix := redisPrefix(t, client)
			tag := strings.TrimSuffix(prefix, ":")
			store, err := redisstore.New(client, redisstore.Config{Prefix: prefix, Wait: opts.lockTimeout,
				HashTag: func(string, string) string { return tag }})
			require.NoError(t, err)
			nf.forRedis(t, client, prefix)
			return fixture{store: store, ledger: redisLedger{client: client, key: prefix + "ledger:{" + tag + "}"}, faults: nf,
				peer: func(*testing.T) inbox.Store { return store }}
		},
	}
}

func redisAddr() string {
	if addr := os.Getenv("INBOX_REDIS_ADDR"); addr != "" {
		return addr
	}
	return "127.0.0.1:6379"
}

// redisClient returns a client of the test Redis, closed when the test ends.
func redisClient(t testing.TB) *redis.Client { return redisClientDial(t, nil) }

// redisClientDial is redisClient dialling through dial, unless it is nil.
func redisClientDial(t testing.TB, dial dialFunc) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: 32, Dialer: dial})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		unavailable(t, "Redis", "INBOX_REDIS_ADDR", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// redisPrefix returns a key prefix of the test's own; its keys (on every primary of a
// Cluster) are deleted when the test ends.
func redisPrefix(t testing.TB, client redis.UniversalClient) string {
	prefix := fmt.Sprintf("test%d%08x:", time.Now().UnixNano()%1e6, rand.Uint32())
	t.Cleanup(func() {
		del := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			return nil
		}
		ctx := context.Background()
		switch c := client.(type) {
		case *redis.ClusterClient:
			_ = c.ForEachMaster(ctx, del)
		case *redis.Client:
			_ = del(ctx, c)
		}
	})
	return prefix
}

// redisLedger is a list of credits that handlers push through the inbox transaction.
type redisLedger struct {
	client redis.UniversalClient
	key    string
}

func (l redisLedger) credit(ctx context.Context, amount int) error {
	tx, ok := inbox.TxFromContext[*redisstore.Tx](ctx)
	if !ok {
		return fmt.Errorf("no *redisstore.Tx in the context")
	}
	return tx.RPush(ctx, l.key, amount).Err()
}

func (l redisLedger) balance(t testing.TB) (total, credits int) {
	t.Helper()
	amounts, err := l.client.LRange(context.Background(), l.key, 0, -1).Result()
	require.NoError(t, err)
	for _, a := range amounts {
		n, err := strconv.Atoi(a)
		require.NoError(t, err)
		total += n
	}
	return total, len(amounts)
}
