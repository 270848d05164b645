package inbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// AttemptLister lists, per consumer and one by one, the attempts that started and have
// not ended, with their start times: one whose handler panicked (abandoned, as a
// crash) and one running (its handler blocked), on every store flavour that can; the
// others declare that they cannot.
func TestAttemptAges(t *testing.T) {
	t.Parallel()
	for _, f := range storeFlavours() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			ctx := f.context() // the tenant flavours' tenant
			fx := f.open(t, storeOpts{})
			lister, ok := fx.store.(inbox.AttemptLister)
			if f.tenant != "" && f.caps.noAttemptCount {
				// The router lists through each tenant's store: one that cannot fails
				// the call, never lists none.
				require.True(t, ok)
				_, err := lister.AttemptAges(ctx)
				require.ErrorContains(t, err, "cannot list its attempts")
				_, err = lister.Attempts(ctx, "billing", 10)
				require.ErrorContains(t, err, "cannot list its attempts")
				return
			}
			f.skipRefusedAttempts(t, fx.store)
			require.Equal(t, !f.caps.noAttemptCount, ok, "the store implements AttemptLister unless its flavour declares it cannot count attempts")
			if f.caps.noAttemptCount {
				t.Skip("the store keeps no attempts with their start times (caps.noAttemptCount)")
			}
			ib := newTestInbox(t, fx.store, inbox.Config{MaxAttempts: 3})
			ages := func() []inbox.AttemptAge {
				t.Helper()
				got, err := lister.AttemptAges(ctx)
				require.NoError(t, err)
				return got
			}
			list := func(consumer string, limit int) []inbox.Attempt {
				t.Helper()
				got, err := lister.Attempts(ctx, consumer, limit)
				require.NoError(t, err)
				return got
			}
			require.Empty(t, ages())
			require.Empty(t, list("billing", 10))
			_, err := lister.Attempts(ctx, "billing", 0)
			require.ErrorContains(t, err, "limit is 0")

			_, err = ib.Process(ctx, "receipts", "order-0", func(context.Context) error { return nil })
			require.NoError(t, err)
			require.Empty(t, ages(), "a committed attempt ended")

			sqltest.AbandonAttempt(ctx, t, ib, "billing", "order-1")
			dead := list("billing", 10)
			require.Len(t, dead, 1, "the panicked attempt never ended")
			require.Equal(t, "billing", dead[0].Consumer)
			require.Equal(t, "order-1", dead[0].Key)
			require.NotEmpty(t, dead[0].Token)
			require.False(t, dead[0].StartedAt.IsZero())
			require.Equal(t, []inbox.AttemptAge{{Consumer: "billing", Unfinished: 1, Oldest: dead[0].StartedAt}}, ages())

			finish := holdAttempt(ctx, t, ib, "billing", "order-2")
			both := list("billing", 10)
			require.Len(t, both, 2, "and one in flight")
			require.Equal(t, dead[0], both[0], "the oldest first")
			require.Equal(t, "order-2", both[1].Key)
			require.False(t, both[1].StartedAt.Before(both[0].StartedAt))
			require.Equal(t, both[:1], list("billing", 1), "at most limit")
			require.Empty(t, list("receipts", 10), "another consumer's")
			require.Equal(t, []inbox.AttemptAge{{Consumer: "billing", Unfinished: 2, Oldest: dead[0].StartedAt}}, ages())
			finish()
			require.Equal(t, dead, list("billing", 10), "the committed one ended")

			if f.tenant != "" {
				_, err := lister.Attempts(context.Background(), "billing", 10)
				require.ErrorIs(t, err, inbox.ErrNoTenant, "one tenant's attempts, never several tenants' in one list")
			}
		})
	}
}
