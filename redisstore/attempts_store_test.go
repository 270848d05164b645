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
// its attempt (abandoned: a panic, or a process that died) is counted by the next claim,
// once, even when that claim is sent twice; a rollback ends its attempt, a commit all of
// them; EndAttempt ends an attempt whose claim's answer was lost, and drops its lease.
func TestAttemptsCountDeliveriesThatDied(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	// A short Wait: a claim that had to wait for a lease left behind fails the test.
	store, _ := newCountingStore(t, client, redisstore.Config{Wait: 100 * time.Millisecond}, 2)
	ctx := context.Background()
	claim := func(attempt string) (inbox.Record, inbox.Claim) {
		rec := inbox.Record{Consumer: "billing", Key: "order-1", Attempt: attempt}
		claim, err := store.Claim(ctx, rec)
		require.NoError(t, err)
		require.NotNil(t, claim.Tx)
		return rec, claim
	}
	for want := range 3 {
		_, first := claim(fmt.Sprint("died-", want))
		_, again := claim(fmt.Sprint("died-", want)) // the same claim sent again
		require.Equal(t, want, first.Unfinished)
		require.Equal(t, want, again.Unfinished, "a claim sent again starts its attempt once")
		require.NoError(t, again.Tx.Abandon(ctx))
	}

	_, clean := claim("clean")
	require.Equal(t, 3, clean.Unfinished)
	require.NoError(t, clean.Tx.Rollback(ctx))

	lost, c := claim("lost") // its answer never reached the caller
	require.Equal(t, 3, c.Unfinished, "the rollback ended its attempt")
	require.NoError(t, store.EndAttempt(ctx, lost))
	require.NoError(t, store.EndAttempt(ctx, lost), "an end sent again")

	_, last := claim("commit")
	require.Equal(t, 3, last.Unfinished, "EndAttempt ended the attempt and dropped its lease")
	require.NoError(t, last.Tx.Commit(ctx, nil))
	started := store.Config().Prefix + "s:{t}:7:billing:order-1"
	require.Zero(t, client.Exists(ctx, started).Val(), "the commit ended every attempt of the key")
}
