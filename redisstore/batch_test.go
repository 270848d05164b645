package redisstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// On a Cluster the keys of a batch must share a slot: with the default HashTag (one tag
// per key) a batch spanning slots is refused before anything is claimed; a HashTag
// that gives the batch one tag (here the consumer) lets it run, and the handler's keys
// carry it too.
func TestBatchOnClusterNeedsOneSlot(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	ctx := context.Background()
	_, perKey := newStore(t, client, redisstore.Config{})
	calls := 0
	keys := []inbox.Item{{Key: "order-1"}, {Key: "order-2"}, {Key: "order-3"}, {Key: "order-4"}}
	_, err := perKey.ProcessBatch(ctx, "billing", keys, func(context.Context, []int) error { calls++; return nil })
	require.ErrorIs(t, err, redisstore.ErrCrossSlot)
	require.Contains(t, err.Error(), "HashTag")
	require.Zero(t, calls)

	store, ib := newStore(t, client, redisstore.Config{HashTag: func(consumer, _ string) string { return "batch-" + consumer }})
	balance := "balance:{batch-billing}:" + strings.ReplaceAll(t.Name(), "/", "-")
	t.Cleanup(func() { _ = client.Del(context.Background(), balance).Err() })
	res, err := ib.ProcessBatch(ctx, "billing", keys, func(ctx context.Context, fresh []int) error {
		tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
		return tx.IncrBy(ctx, balance, int64(len(fresh))).Err()
	})
	require.NoError(t, err)
	require.Equal(t, 4, res.Processed)
	res, err = ib.ProcessBatch(ctx, "billing", keys, func(context.Context, []int) error { calls++; return nil })
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true, true}, res.Duplicate)
	n, err := client.Get(ctx, balance).Int()
	require.NoError(t, err)
	require.Equal(t, 4, n, "applied once")
	claim, err := store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-3"})
	require.NoError(t, err)
	require.True(t, claim.Duplicate, "a key a batch committed is a duplicate of a single claim")
}
