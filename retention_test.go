package inbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// noTurns is a store without purge turns: an embedded Store hides them.
type noTurns struct{ inbox.Store }

func TestNewRetentionNamesTheField(t *testing.T) {
	t.Parallel()
	store := newPgxStore(t, pgPool(t), inbox.PostgresConfig{})
	ok := inbox.PurgeConfig{OlderThan: 720 * time.Hour}
	for _, tc := range []struct {
		name string
		cfg  inbox.RetentionConfig
		want string
	}{
		{"no store", inbox.RetentionConfig{Purge: ok}, "inbox: invalid retention config: Store is nil"},
		{"no turns", inbox.RetentionConfig{Store: noTurns{store}, Purge: ok}, "has no purge turns (inbox.PurgeTurns), which keep a fleet's purges one at a time: purge it with PurgeEvery"},
		{"negative interval", inbox.RetentionConfig{Store: store, Purge: ok, Interval: -time.Second}, "Interval is -1s"},
		{"no age", inbox.RetentionConfig{Store: store}, "inbox: invalid purge config: OlderThan is 0s"},
		{"below the minimum retention", inbox.RetentionConfig{Store: store, Purge: inbox.PurgeConfig{OlderThan: time.Hour}}, "refusing to purge keys younger than 1h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := inbox.NewRetention(tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := inbox.NewRetention(inbox.RetentionConfig{Store: store, Purge: inbox.PurgeConfig{OlderThan: time.Hour}})
	require.ErrorIs(t, err, inbox.ErrRetention)
	require.True(t, inbox.Permanent(inbox.ErrPurgeTurnBehindPooler))
}

// Run purges at once (within the jitter) and at every interval, until its context ends.
func TestRetentionRunsUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	f.process(t, "billing", 3)
	var runs, keys atomic.Int64
	r, err := inbox.NewRetention(inbox.RetentionConfig{Store: f.store, Interval: 20 * time.Millisecond,
		Purge: inbox.PurgeConfig{OlderThan: time.Nanosecond, Force: true},
		Observer: inbox.RetentionObserverFunc(func(_ context.Context, run inbox.RetentionRun) {
			require.NoError(t, run.Err)
			require.True(t, run.Turn)
			keys.Add(run.Keys)
			runs.Add(1)
		})})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool { return runs.Load() >= 3 }, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.EqualValues(t, 3, keys.Load(), "the keys went in the first run, and the next ones found none")
	require.Empty(t, f.keys(t))
}

// On a TenantStore a run takes each tenant's turn: a tenant whose turn another holder
// has is skipped, the others are purged.
func TestRetentionAcrossTenants(t *testing.T) {
	t.Parallel()
	for _, shape := range tenantShapes() {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ts := shape.open(t).ts
			fillTenants(t, ts, 4)
			var mu sync.Mutex
			observed := map[string]int{}
			r, err := inbox.NewRetention(inbox.RetentionConfig{Store: ts,
				Purge: inbox.PurgeConfig{OlderThan: time.Millisecond, Force: true, BatchSize: 3},
				Observer: inbox.RetentionObserverFunc(func(_ context.Context, run inbox.RetentionRun) {
					mu.Lock()
					defer mu.Unlock()
					observed[run.Tenant]++
				})})
			require.NoError(t, err)
			held, err := ts.TakePurgeTurn(inbox.ContextWithTenant(ctx, "tenant-b"), time.Second)
			require.NoError(t, err)
			require.NotNil(t, held)
			runs, err := r.Purge(ctx)
			require.NoError(t, err)
			require.Len(t, runs, 3)
			want := map[string]int64{"tenant-a": 4, "tenant-b": 0, "tenant-c": 4}
			if !shape.sql { // Redis expires its keys: every turn is granted, and purges nothing
				want = map[string]int64{}
			}
			for _, run := range runs {
				require.Equal(t, want[run.Tenant], run.Keys, run.Tenant)
				require.Equal(t, run.Tenant != "tenant-b" || !shape.sql, run.Turn, run.Tenant)
			}
			require.Equal(t, []string{"tenant-a", "tenant-b", "tenant-c"}, []string{runs[0].Tenant, runs[1].Tenant, runs[2].Tenant})
			require.NoError(t, held.Release(ctx))

			runs, err = r.Purge(ctx)
			require.NoError(t, err)
			if shape.sql {
				require.True(t, runs[1].Turn)
				require.EqualValues(t, 4, runs[1].Keys, "tenant-b's turn, given back, is taken")
				for _, tenant := range tenants {
					require.Zero(t, keysIn(t, ts, tenant))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[string]int{"tenant-a": 2, "tenant-b": 2, "tenant-c": 2}, observed)
		})
	}
}
