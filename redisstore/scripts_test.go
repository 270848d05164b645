package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// scriptsStore returns a store on the test Redis (INBOX_REDIS_ADDR) under a key prefix of
// its own, deleted when the test ends, with its client and prefix. Outside CI a Redis
// that cannot be reached skips the test.
func scriptsStore(t *testing.T) (*Store, *redis.Client, string) {
	t.Helper()
	addr := os.Getenv("INBOX_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip("Redis is not reachable (set INBOX_REDIS_ADDR):", err)
	}
	prefix := fmt.Sprintf("test:%08x:", rand.Uint32())
	t.Cleanup(func() {
		iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	s, err := New(client, Config{Prefix: prefix})
	require.NoError(t, err)
	return s, client, prefix
}

// go-redis resends a command whose connection broke (MaxRetries), so the claim pipeline
// or the commit script may run twice for one call: both must give the answer of the
// first run.
func TestScriptsAreIdempotentUnderRetries(t *testing.T) {
	s, client, prefix := scriptsStore(t)
	ctx := context.Background()
	k := s.keys("billing", "order-1")
	claim := func(owner string) verdict {
		v, err := s.tryClaim(ctx, k, owner, "", false)
		require.NoError(t, err)
		return v
	}
	first := claim("owner-a")
	require.Equal(t, "", first.held, "taken")
	again := claim("owner-a")
	require.Equal(t, "owner-a", again.held, "a resent claim finds its own lease")
	require.Greater(t, again.fence, first.fence, "every claim bumps the fence")
	require.Equal(t, "owner-a", claim("owner-b").held, "another owner finds it held")

	tx := s.newTx(inbox.Record{Consumer: "billing", Key: "order-1"}, k, "owner-a", first.fence, "")
	tx.Incr(ctx, prefix+"counter")
	cmds, _ := tx.Pipeliner.Exec(ctx)
	argv, _, err := s.encode(ctx, k, cmds)
	require.NoError(t, err)
	args := append([]any{tx.token, ms(s.cfg.Retention), ms(s.cfg.Lease), nil, "0", nil, "0", len(cmds), 0, ""}, argv...)
	keys := []string{k.name(kindClaim), k.name(kindLease), k.name(kindRelease), k.name(kindWaiters), k.name(kindAttempts)}
	for range 2 {
		res, err := s.runCommit(ctx, keys, args)
		require.NoError(t, err)
		require.Equal(t, []any{int64(1)}, res, "a retried commit reports the commit that ran")
	}
	require.Equal(t, "1", client.Get(ctx, prefix+"counter").Val(), "the retry applied nothing more")
	other := append([]any{"owner-b"}, args[1:]...)
	res, err := s.runCommit(ctx, keys, other)
	require.NoError(t, err)
	require.Equal(t, []any{int64(0)}, res, "another token is refused")
}

// The batch scripts give the answer of their first run when go-redis resends them.
func TestBatchScriptsAreIdempotentUnderRetries(t *testing.T) {
	s, client, prefix := scriptsStore(t)
	ctx := context.Background()
	recs := []inbox.Record{{Consumer: "billing", Key: "order-1"}, {Consumer: "billing", Key: "order-2", Fingerprint: []byte("fp")}}
	var keys []string
	for _, r := range recs {
		k := s.keys(r.Consumer, r.Key)
		keys = append(keys, k.name(kindClaim), k.name(kindLease), k.name(kindWaiters))
	}
	claim := func(owner string) []any {
		res, err := claimBatchScript.Run(ctx, client, keys, owner, ms(s.cfg.Lease), ms(s.cfg.Retention), "0").Slice()
		require.NoError(t, err)
		return res
	}
	first := claim("owner-a")
	require.Equal(t, int64(1), first[0], "taken")
	again := claim("owner-a")
	require.Equal(t, []any{int64(1), int64(0), "", int64(0), ""}, []any{again[0], again[2], again[3], again[4], again[5]}, "a resent claim finds its own leases (no Forget: generation '')")
	require.Equal(t, []any{int64(0), int64(1)}, claim("owner-b")[:2], "another owner finds the first key held, and takes nothing")

	bc, err := s.batchClaim(recs, []claimKeys{s.keys("billing", "order-1"), s.keys("billing", "order-2")}, "owner-a", first)
	require.NoError(t, err)
	tx := bc.Tx.(*Tx)
	tx.Incr(ctx, prefix+"counter")
	cmds, _ := tx.Pipeliner.Exec(ctx)
	for range 2 {
		tx.finished = false
		require.NoError(t, tx.commitBatch(ctx, cmds), "a retried commit reports the commit that ran")
	}
	require.Equal(t, "1", client.Get(ctx, prefix+"counter").Val(), "the retry applied nothing more")
	res := claim("owner-c")
	require.Equal(t, []any{int64(1), int64(1), nil, int64(1), "fp"}, []any{res[0], res[2], res[3], res[4], res[5]}, "both committed, with the fingerprint")
}
