package inbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// Batches and offset mode through a TenantStore, on a SQLite file per tenant: a batch
// runs in the tenant its context or its items name, never in another, and a batch
// whose items name different tenants is refused, permanent, before anything is claimed
// anywhere. The conformance suite's tenant flavours run the batch and offset cases on
// the servers.

// sqliteTenants returns a TenantStore over a SQLite database file per test tenant, and
// each tenant's store, to look into one tenant directly.
func sqliteTenants(t *testing.T) (*inbox.TenantStore, map[string]*sqlitestore.Store) {
	stores := map[string]*sqlitestore.Store{}
	for _, tenant := range tenants {
		store, err := sqlitestore.New(sqliteDB(t, modernc, sqlitePath(t, modernc)), sqlitestore.Config{})
		require.NoError(t, err)
		require.NoError(t, store.CreateSchema(context.Background()))
		stores[tenant] = store
	}
	ts := newTenantStore(t, func(_ context.Context, i int) (inbox.Tenant, error) {
		return inbox.Tenant{Store: stores[tenants[i]]}, nil
	})
	return ts, stores
}

// claimed reports whether consumer's key is stored in store.
func claimed(t *testing.T, store inbox.Store, consumer, key string) bool {
	t.Helper()
	claim, err := store.Claim(context.Background(), inbox.Record{Consumer: consumer, Key: key})
	require.NoError(t, err)
	if claim.Tx != nil {
		require.NoError(t, claim.Tx.Rollback(context.Background()))
	}
	return claim.Duplicate
}

func TestTenantBatchesRunInOneTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts, stores := sqliteTenants(t)
	ib := newTestInbox(t, ts, inbox.Config{})
	process := func(ctx context.Context, its []inbox.Item) ([]int, error) {
		var got []int
		_, err := ib.ProcessBatch(ctx, "billing", its, func(ctx context.Context, fresh []int) error {
			got = fresh
			return nil
		})
		return got, err
	}

	// The tenant of the context.
	got, err := process(inbox.ContextWithTenant(ctx, "tenant-b"), items("k1", "k2"))
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, got)
	require.True(t, claimed(t, stores["tenant-b"], "billing", "k1"))
	require.False(t, claimed(t, stores["tenant-a"], "billing", "k1"), "nothing crosses tenants")

	// The tenant the items name, without one in the context; items that name none follow.
	got, err = process(ctx, []inbox.Item{{Key: "k1", Tenant: "tenant-a"}, {Key: "k2"}, {Key: "k3", Tenant: "tenant-a"}})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2}, got, "tenant-a's keys are its own")
	require.True(t, claimed(t, stores["tenant-a"], "billing", "k3"))
	require.False(t, claimed(t, stores["tenant-b"], "billing", "k3"))

	// No tenant anywhere: refused, as a single message is.
	_, err = process(ctx, items("k9"))
	require.ErrorIs(t, err, inbox.ErrNoTenant)
	require.True(t, inbox.Permanent(err))

	// Items naming different tenants, or another than the context's: refused before
	// anything is claimed in any tenant.
	for _, tc := range []struct {
		name string
		ctx  context.Context
		its  []inbox.Item
		bad  int
	}{
		{"two tenants", ctx, []inbox.Item{{Key: "m1", Tenant: "tenant-a"}, {Key: "m2"}, {Key: "m3", Tenant: "tenant-c"}}, 2},
		{"another than the context's", inbox.ContextWithTenant(ctx, "tenant-b"), []inbox.Item{{Key: "m1"}, {Key: "m2", Tenant: "tenant-c"}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			_, err := ib.ProcessBatch(tc.ctx, "billing", tc.its, func(context.Context, []int) error { calls++; return nil })
			var itemErr *inbox.BatchItemError
			require.ErrorAs(t, err, &itemErr)
			require.Equal(t, tc.bad, itemErr.Index)
			require.ErrorIs(t, err, inbox.ErrMixedTenants)
			require.True(t, inbox.Permanent(err), "a retry of the same batch cannot help")
			require.Contains(t, err.Error(), "split the batch by tenant")
			require.Zero(t, calls)
			for _, tenant := range tenants {
				for _, key := range []string{"m1", "m2", "m3"} {
					require.False(t, claimed(t, stores[tenant], "billing", key), "nothing written in %s", tenant)
				}
			}
		})
	}
}

func TestTenantOffsetsArePerTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts, _ := sqliteTenants(t)
	ib := newTestInbox(t, ts, inbox.Config{})
	a, b := inbox.ContextWithTenant(ctx, "tenant-a"), inbox.ContextWithTenant(ctx, "tenant-b")
	count := func(ctx context.Context, positions []inbox.Position) int {
		n := 0
		_, err := ib.ProcessOffsets(ctx, "billing", positions, func(_ context.Context, fresh []int) error { n = len(fresh); return nil })
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 3, count(a, at("orders", 0, 0, 1, 2)))
	require.Equal(t, 2, count(b, at("orders", 0, 1, 2)), "tenant-b's offsets are its own")
	require.Zero(t, count(a, at("orders", 0, 2)))

	require.Equal(t, int64(3), offsetOf(a, t, ib, "billing", "orders", 0))
	found, err := ib.SetOffset(b, "billing", "orders", 0, 10)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(10), offsetOf(b, t, ib, "billing", "orders", 0))
	require.Equal(t, int64(3), offsetOf(a, t, ib, "billing", "orders", 0), "a reset in one tenant leaves the others")

	_, err = ib.Offsets(ctx, "billing")
	require.ErrorIs(t, err, inbox.ErrNoTenant, "offsets are per tenant: a list without one would not say whose")
	_, err = inbox.New(inbox.Config{Store: ts, Consumer: "billing", Position: positionFromMetadata})
	require.NoError(t, err, "New checks every tenant's offsets table")
}
