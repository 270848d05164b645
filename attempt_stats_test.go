package inbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// UnfinishedAttempts counts, per consumer, the attempts that started and have not ended:
// one running (its handler blocked) and one whose handler panicked (abandoned, as a
// crash), on every store flavour that can; the others declare that they cannot.
func TestUnfinishedAttempts(t *testing.T) {
	t.Parallel()
	for _, f := range storeFlavours() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			ctx := f.context() // the tenant flavours' tenant
			fx := f.open(t, storeOpts{})
			counter, ok := fx.store.(inbox.AttemptCounter)
			if f.tenant != "" && f.caps.noAttemptCount {
				// The router counts through each tenant's store: one that cannot fails the
				// call, never counts as none.
				require.True(t, ok)
				_, err := counter.UnfinishedAttempts(ctx)
				require.ErrorContains(t, err, "cannot count unfinished attempts")
				return
			}
			f.skipRefusedAttempts(t, fx.store)
			require.Equal(t, !f.caps.noAttemptCount, ok, "the store implements AttemptCounter unless its flavour declares it cannot")
			if f.caps.noAttemptCount {
				t.Skip("the store cannot count unfinished attempts per consumer (caps.noAttemptCount)")
			}
			ib := newTestInbox(t, fx.store, inbox.Config{MaxAttempts: 3})
			unfinished := func() map[string]int64 {
				t.Helper()
				got, err := counter.UnfinishedAttempts(ctx)
				require.NoError(t, err)
				return got
			}
			require.Empty(t, unfinished())

			_, err := ib.Process(ctx, "receipts", "order-0", func(context.Context) error { return nil })
			require.NoError(t, err)
			require.Empty(t, unfinished(), "a committed attempt ended")

			sqltest.AbandonAttempt(ctx, t, ib, "billing", "order-1")
			require.Equal(t, map[string]int64{"billing": 1}, unfinished(), "the panicked attempt never ended")

			finish := holdAttempt(ctx, t, ib, "billing", "order-2")
			require.Equal(t, map[string]int64{"billing": 2}, unfinished(), "and one in flight")
			finish()
			require.Equal(t, map[string]int64{"billing": 1}, unfinished(), "the committed one ended")
		})
	}
}

// holdAttempt processes key for consumer with a handler that blocks, and returns once the
// handler runs (its attempt started and has not ended); finish lets the handler return
// and requires that the message was processed.
func holdAttempt(ctx context.Context, t *testing.T, ib *inbox.Inbox, consumer, key string) (finish func()) {
	t.Helper()
	running, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := ib.Process(ctx, consumer, key, func(context.Context) error {
			close(running)
			<-release
			return nil
		})
		done <- err
	}()
	<-running
	return func() {
		t.Helper()
		close(release)
		require.NoError(t, <-done)
	}
}
