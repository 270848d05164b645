package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// The store's side of the attempt contract: a delivery that held the key and never ended
// its attempt is counted by the next claim, once; a claim sent again with the same
// attempt counts it once.
func TestAttemptsCountDeliveriesThatDied(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	store, _ := newCountingStore(t, client, redisstore.Config{Lease: 200 * time.Millisecond}, 2)
	ctx := context.Background()
	for want := range 3 {
		rec := inbox.Record{Consumer: "billing", Key: "order-1", Attempt: fmt.Sprint("attempt-", want)}
		require.NoError(t, store.StartAttempt(ctx, rec))
		var claim inbox.Claim
		for range 2 {
			var err error
			claim, err = store.Claim(ctx, rec)
			require.NoError(t, err)
			require.NotNil(t, claim.Tx)
			require.Equal(t, want, claim.Unfinished)
		}
		require.NoError(t, claim.Tx.Rollback(ctx)) // a panic: rolled back, never ended
	}
	// A clean failure ends its attempt; a commit ends them all.
	rec := inbox.Record{Consumer: "billing", Key: "order-1", Attempt: "attempt-clean"}
	claim, err := store.Claim(ctx, rec)
	require.NoError(t, err)
	require.Equal(t, 3, claim.Unfinished)
	require.NoError(t, claim.Tx.Rollback(ctx))
	require.NoError(t, store.EndAttempt(ctx, rec))
	require.NoError(t, store.EndAttempt(ctx, rec), "a resent end")
	rec.Attempt = "attempt-commit"
	claim, err = store.Claim(ctx, rec)
	require.NoError(t, err)
	require.Equal(t, 3, claim.Unfinished, "the clean failure is not counted, and its lease was dropped at once")
	require.NoError(t, claim.Tx.Commit(ctx, nil))
	started := store.Config().Prefix + "s:{t}:7:billing:order-1"
	require.Zero(t, client.Exists(ctx, started).Val(), "the commit ended every attempt of the key")
}
