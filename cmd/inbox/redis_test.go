package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

func TestRedis(t *testing.T) {
	t.Parallel()
	addr := os.Getenv("INBOX_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		unavailable(t, "Redis", "INBOX_REDIS_ADDR", err)
	}
	table := fmt.Sprintf("clitest%08x", rand.Uint32())
	t.Cleanup(func() {
		iter := client.Scan(ctx, 0, table+":*", 100).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	store, err := redisstore.New(client, redisstore.Config{Prefix: table + ":"})
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store})
	require.NoError(t, err)
	for _, c := range []string{"billing", "billing", "shipping"} {
		_, err := ib.Process(ctx, c, fmt.Sprint(c, "-", rand.Uint32()), func(context.Context) error { return nil })
		require.NoError(t, err)
	}
	_, err = ib.Process(ctx, "billing", "billing-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	dsn := "redis://" + addr + "/0"

	res := inboxCLI(t, "stats", "--dsn", dsn, "--table", table)
	require.Equal(t, 0, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 4, res.stdout)
	require.Equal(t, []string{"billing", "3"}, strings.Fields(lines[1])[:2])
	require.Equal(t, []string{"shipping", "1"}, strings.Fields(lines[2])[:2])

	res = inboxCLI(t, "forget", "--dsn", dsn, "--table", table, "--consumer", "billing", "--key", "billing-1")
	require.Equal(t, 0, res.code, res.stderr)
	requireOneLineError(t, inboxCLI(t, "forget", "--dsn", dsn, "--table", table, "--consumer", "billing", "--key", "billing-1"),
		exitFail, `no key "billing-1" for consumer "billing"`)

	res = inboxCLI(t, "purge", "--dsn", dsn, "--table", table, "--older-than", "720h")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "deleted 0 keys")
}
