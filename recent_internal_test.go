package inbox

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestRecentKeysForgetsTheOldest checks the bound of Config.RecentKeys: the set holds the
// last n keys, per consumer, and a key added twice takes one place.
func TestRecentKeysForgetsTheOldest(t *testing.T) {
	r := &recentKeys{keys: map[recentKey]struct{}{}, ring: make([]recentKey, 3)}
	rec := func(consumer string, i int) Record { return Record{Consumer: consumer, Key: fmt.Sprint("k", i)} }
	ctx := t.Context()
	for i := range 3 {
		r.add(ctx, rec("a", i))
	}
	r.add(ctx, rec("a", 2)) // already held: no place taken
	require.True(t, r.has(ctx, rec("a", 0)))
	require.False(t, r.has(ctx, rec("b", 0)), "keys are per consumer")
	require.False(t, r.has(ContextWithTenant(ctx, "acme"), rec("a", 0)), "keys are per tenant")
	r.add(ctx, rec("a", 3))
	require.False(t, r.has(ctx, rec("a", 0)), "the oldest key went")
	for i := 1; i <= 3; i++ {
		require.True(t, r.has(ctx, rec("a", i)))
	}
	require.Len(t, r.keys, 3)
	var none *recentKeys // hints off
	none.add(ctx, rec("a", 0))
	require.False(t, none.has(ctx, rec("a", 0)))
}

// TestRecentKeysOnlyForStoresThatRead: hints are kept only over a store that can read a
// stored row by itself (a TenantStore passes the read on to its tenants' stores), and
// RecentKeys < 0 turns them off.
func TestRecentKeysOnlyForStoresThatRead(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@127.0.0.1:1/none") // never dialled
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pg, err := NewPostgresStore(pool, PostgresConfig{})
	require.NoError(t, err)
	require.NotNil(t, newRecentKeys(Config{Store: pg, RecentKeys: 10}))
	require.Nil(t, newRecentKeys(Config{Store: pg, RecentKeys: -1}))
	require.NotNil(t, newRecentKeys(Config{Store: &TenantStore{}, RecentKeys: 10}))
}

// TestRecentKeysAllocateNothing: every first delivery looks its key up and adds it, so
// neither allocates (the key is a struct of the strings the Record already holds).
func TestRecentKeysAllocateNothing(t *testing.T) {
	r := &recentKeys{keys: map[recentKey]struct{}{}, ring: make([]recentKey, 8)}
	ctx := ContextWithTenant(t.Context(), "acme")
	rec := Record{Consumer: "billing", Key: "order-1"}
	r.add(ctx, rec)
	allocs := testing.AllocsPerRun(100, func() {
		if !r.has(ctx, rec) {
			t.Fatal("the key is remembered")
		}
		r.add(ctx, rec)
	})
	require.Zero(t, allocs)
}
