package inbox_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The TenantStore's life cycle: each tenant opened once, also under a race, without one
// tenant's slow Lookup holding up another; transient lookup failures retried, not
// cached; a removed tenant closed only once its calls and transactions ended.

// schemaLookup returns a Lookup of stores on the schema of each test tenant, on one
// shared pool, with the tables created, and counts the calls per tenant. gate, when not
// nil, is waited on by each call first.
func schemaLookup(t *testing.T, gate func(tenant string)) (lookup func(ctx context.Context, tenant string) (inbox.Tenant, error), calls func(tenant string) int, closed func(tenant string) int) {
	schemas := tenantSchemas(t)
	pool := pgPoolWith(t, pgDSN(t, nil))
	for _, s := range schemas {
		store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: s})
		require.NoError(t, err)
		require.NoError(t, store.CreateSchema(context.Background()))
	}
	var mu sync.Mutex
	called, closes := map[string]int{}, map[string]int{}
	lookup = func(_ context.Context, tenant string) (inbox.Tenant, error) {
		mu.Lock()
		called[tenant]++
		mu.Unlock()
		if gate != nil {
			gate(tenant)
		}
		i, err := tenantIndex(tenant)
		if err != nil {
			return inbox.Tenant{}, err
		}
		store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: schemas[i], SearchPath: true})
		return inbox.Tenant{Store: store, Close: func() { mu.Lock(); closes[tenant]++; mu.Unlock() }}, err
	}
	calls = func(tenant string) int { mu.Lock(); defer mu.Unlock(); return called[tenant] }
	closed = func(tenant string) int { mu.Lock(); defer mu.Unlock(); return closes[tenant] }
	return lookup, calls, closed
}

func newTenantStoreWith(t *testing.T, lookup func(ctx context.Context, tenant string) (inbox.Tenant, error)) *inbox.TenantStore {
	ts, err := inbox.NewTenantStore(inbox.TenantConfig{Lookup: lookup})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ts.Close() })
	return ts
}

func TestTenantOpenedOnceWithoutHoldingOthers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	lookup, calls, _ := schemaLookup(t, func(tenant string) {
		if tenant == "tenant-a" {
			<-release // tenant-a's database is slow to answer
		}
	})
	ts := newTenantStoreWith(t, lookup)
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the store closes: a failed check must not leave Lookup stuck
	ib := newTestInbox(t, ts, inbox.Config{})
	ctx := context.Background()

	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 100 { // a hundred messages of a new tenant at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := ib.Process(inbox.ContextWithTenant(ctx, "tenant-a"), "billing", "order-1", func(context.Context) error { return nil })
			require.NoError(t, err)
		}()
	}
	close(start)
	// tenant-a's Lookup is stuck: tenant-b opens and processes meanwhile.
	for i := range 20 {
		_, err := ib.Process(inbox.ContextWithTenant(ctx, "tenant-b"), "billing", "order-1", func(context.Context) error { return nil })
		require.NoError(t, err, "call %d for tenant-b", i)
	}
	// A caller whose context ends stops waiting for the open.
	cctx, cancel := context.WithTimeout(inbox.ContextWithTenant(ctx, "tenant-a"), 50*time.Millisecond)
	defer cancel()
	_, err := ib.Process(cctx, "billing", "order-2", func(context.Context) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	unblock()
	wg.Wait()
	require.Equal(t, 1, calls("tenant-a"), "one Lookup for a hundred racing messages")
	require.Equal(t, 1, calls("tenant-b"))
	require.ElementsMatch(t, []string{"tenant-a", "tenant-b"}, ts.Open())
}

func TestTenantLookupFailuresAreNotCached(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	directoryDown := errors.New("tenant directory unreachable")
	lookup, calls, _ := schemaLookup(t, nil)
	ts := newTenantStoreWith(t, func(ctx context.Context, tenant string) (inbox.Tenant, error) {
		if down.Load() {
			return inbox.Tenant{}, directoryDown
		}
		return lookup(ctx, tenant)
	})
	ib := newTestInbox(t, ts, inbox.Config{})
	ctx := inbox.ContextWithTenant(context.Background(), "tenant-a")
	_, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error { return nil })
	require.ErrorIs(t, err, directoryDown)
	require.NotErrorIs(t, err, inbox.ErrUnknownTenant, "a directory that is down is transient: the message comes again")
	require.NotErrorIs(t, err, inbox.ErrNoTenant)
	require.Contains(t, err.Error(), `tenant "tenant-a"`)
	down.Store(false)
	dup, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error { return nil })
	require.NoError(t, err, "the next call looks up again")
	require.False(t, dup)
	require.Equal(t, 1, calls("tenant-a"))

	// An unknown tenant is not cached either: a tenant created later is found.
	_, err = ib.Process(inbox.ContextWithTenant(context.Background(), "tenant-z"), "billing", "order-1", func(context.Context) error { return nil })
	require.ErrorIs(t, err, inbox.ErrUnknownTenant)
	_, err = ib.Process(inbox.ContextWithTenant(context.Background(), "tenant-z"), "billing", "order-1", func(context.Context) error { return nil })
	require.ErrorIs(t, err, inbox.ErrUnknownTenant)
	require.Equal(t, 2, calls("tenant-z"))
}

func TestRemovedTenantClosesAfterItsTransactions(t *testing.T) {
	t.Parallel()
	lookup, calls, closed := schemaLookup(t, nil)
	ts := newTenantStoreWith(t, lookup)
	ib := newTestInbox(t, ts, inbox.Config{MaxAttempts: 2})
	ctx := inbox.ContextWithTenant(context.Background(), "tenant-a")

	inHandler, hold, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // a failed check must not leave the handler holding a connection
	go func() {
		_, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error {
			close(inHandler)
			<-hold
			return nil
		})
		done <- err
	}()
	<-inHandler
	removed := make(chan error, 1)
	go func() { removed <- ts.Remove(context.Background(), "tenant-a") }()
	require.Eventually(t, func() bool { return !slices.Contains(ts.Open(), "tenant-a") }, 10*time.Second, time.Millisecond,
		"Remove forgets the tenant at once, before its store drains")
	// The next call opens the tenant again, beside the old store that drains.
	dup, err := ib.Process(ctx, "billing", "order-2", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, 2, calls("tenant-a"))
	select {
	case err := <-removed:
		t.Fatalf("Remove returned (%v) while a transaction of the tenant's store was open", err)
	default:
	}
	require.Zero(t, closed("tenant-a"), "not closed under an open transaction")
	release()
	require.NoError(t, <-done, "the transaction in flight commits on the removed store")
	require.NoError(t, <-removed)
	require.Equal(t, 1, closed("tenant-a"), "closed once, after the transaction ended")

	// A Remove that gives up waiting still closes, later.
	inHandler, hold = make(chan struct{}), make(chan struct{})
	release = sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	go func() {
		_, err := ib.Process(ctx, "billing", "order-3", func(context.Context) error {
			close(inHandler)
			<-hold
			return nil
		})
		done <- err
	}()
	<-inHandler
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, ts.Remove(short, "tenant-a"), context.DeadlineExceeded)
	release()
	require.NoError(t, <-done)
	require.Eventually(t, func() bool { return closed("tenant-a") == 2 }, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, ts.Close())
	_, err = ib.Process(ctx, "billing", "order-4", func(context.Context) error { return nil })
	require.Error(t, err, "a closed TenantStore routes nothing")
	require.Equal(t, 2, closed("tenant-a"))
}

func TestTenantStoreConfig(t *testing.T) {
	t.Parallel()
	_, err := inbox.NewTenantStore(inbox.TenantConfig{Parallelism: -1, OpenTimeout: -time.Second})
	require.ErrorContains(t, err, "Lookup is nil")
	require.ErrorContains(t, err, "Parallelism is -1")
	require.ErrorContains(t, err, "OpenTimeout is -1s")

	lookup, _, _ := schemaLookup(t, nil)
	ts := newTenantStoreWith(t, lookup)
	// Without TenantConfig.Tenants: nothing to verify up front, and no purge across tenants.
	require.NoError(t, ts.Verify(context.Background()))
	_, err = inbox.Purge(context.Background(), ts, inbox.PurgeConfig{OlderThan: time.Hour, Force: true})
	require.ErrorContains(t, err, "TenantConfig.Tenants")
	_, err = ts.PurgeBatch(context.Background(), time.Now(), 10)
	require.ErrorIs(t, err, inbox.ErrNoTenant)
	require.ErrorContains(t, err, "inbox.Purge and PurgeEvery purge every tenant")
	// A tenant's store that cannot create its tables says so, naming the tenant.
	ts = newTenantStoreWith(t, func(ctx context.Context, tenant string) (inbox.Tenant, error) {
		t, err := lookup(ctx, tenant)
		return inbox.Tenant{Store: storeOnly{t.Store}}, err
	})
	err = ts.CreateSchema(inbox.ContextWithTenant(context.Background(), "tenant-c"))
	require.ErrorContains(t, err, `tenant "tenant-c"`)
	require.ErrorContains(t, err, "no CreateSchema method")
}

// storeOnly hides every method of a store but the Store interface's.
type storeOnly struct{ inbox.Store }

// A Tenant that Lookup returns with an error, or without a Store, is not kept, and is
// closed: a Lookup that opened a pool and then failed (a store that could not be made
// on it) may return both, and the pool does not leak.
func TestLookupFailureClosesWhatItReturned(t *testing.T) {
	t.Parallel()
	open, _, _ := schemaLookup(t, nil)
	migrationCheck := errors.New("the tenant's schema is being migrated")
	var closed atomic.Int32
	ts := newTenantStoreWith(t, func(ctx context.Context, tenant string) (inbox.Tenant, error) {
		opened, err := open(ctx, tenant)
		require.NoError(t, err)
		opened.Close = func() { closed.Add(1) }
		switch tenant {
		case "tenant-a":
			return opened, migrationCheck
		case "tenant-b":
			opened.Store = nil
			return opened, nil
		}
		return opened, nil
	})
	ib := newTestInbox(t, ts, inbox.Config{})
	for _, tc := range []struct {
		tenant string
		want   error
	}{{"tenant-a", migrationCheck}, {"tenant-b", inbox.ErrUnknownTenant}} {
		_, err := ib.Process(inbox.ContextWithTenant(context.Background(), tc.tenant), "billing", "order-1", func(context.Context) error { return nil })
		require.ErrorIs(t, err, tc.want)
	}
	require.EqualValues(t, 2, closed.Load(), "both closed, once each")
	require.Empty(t, ts.Open())
}
