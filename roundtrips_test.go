package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// TestRoundTrips_MaxAttempts counts the round trips of one message through pgx over a
// pool of one connection, with a handler that runs one INSERT: a first delivery, a
// duplicate, and a first delivery whose handler fails. Counting attempts adds one round
// trip to a first delivery (the count, which must come after the claim and before the
// handler), none to a duplicate or a failure: the attempt's start travels with the
// claim, its end with the commit or the rollback. With Config.RecentKeys (the default)
// the duplicate of a key the inbox committed is one read, without a claim or an
// attempt; with it off, the claim path, unless the duplicate is hinted as a replay
// (ContextWithReplayHint): then the read again. The figures are the minimum; a change
// that adds one fails here.
func TestRoundTrips_MaxAttempts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		maxAttempts, recentKeys int
		// hinted sends the duplicate with ContextWithReplayHint.
		hinted bool
		// tenant puts the store behind a TenantStore, its tenant in the context.
		tenant             bool
		first, dup, failed int64
		why                string
	}{
		{maxAttempts: 0, recentKeys: -1, first: 3, dup: 2, failed: 3,
			why: "first: BEGIN+INSERT key (folded); handler INSERT; COMMIT. duplicate: BEGIN+INSERT fails; ROLLBACK+SELECT stored. failed: claim; handler; ROLLBACK"},
		{maxAttempts: 3, recentKeys: -1, first: 4, dup: 2, failed: 4,
			why: "first: start+BEGIN+INSERT key (folded); count; handler INSERT; DELETE attempt+COMMIT+unlock (pipelined). duplicate: start+BEGIN+INSERT fails; " +
				"ROLLBACK+DELETE attempt+unlock+SELECT stored. failed: claim; count; handler; ROLLBACK+DELETE attempt+unlock (pipelined)"},
		{maxAttempts: 0, first: 3, dup: 1, failed: 3,
			why: "Config.RecentKeys: the duplicate of a key this inbox committed is the read of its stored row (SELECT stored); the rest as without"},
		{maxAttempts: 3, first: 4, dup: 1, failed: 4,
			why: "Config.RecentKeys: the duplicate of a key this inbox committed is the read of its stored row, no attempt started; the rest as without"},
		{maxAttempts: 0, recentKeys: -1, hinted: true, first: 3, dup: 1, failed: 3,
			why: "a duplicate hinted as a replay, its key not remembered: the read of its stored row; the rest as without"},
		{maxAttempts: 3, recentKeys: -1, hinted: true, first: 4, dup: 1, failed: 4,
			why: "a duplicate hinted as a replay, its key not remembered: the read of its stored row, no attempt started; the rest as without"},
		{maxAttempts: 0, tenant: true, first: 3, dup: 1, failed: 3,
			why: "behind a TenantStore: the same, the remembered key read in the tenant's store"},
		{maxAttempts: 0, recentKeys: -1, hinted: true, tenant: true, first: 3, dup: 1, failed: 3,
			why: "behind a TenantStore: a duplicate hinted as a replay is read in the tenant's store"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("MaxAttempts=%d/RecentKeys=%d/hinted=%v/tenant=%v", tt.maxAttempts, tt.recentKeys, tt.hinted, tt.tenant), func(t *testing.T) {
			t.Parallel()
			rt := &sqltest.RoundTrips{}
			cfg, err := pgxpool.ParseConfig(postgresDSN())
			require.NoError(t, err)
			cfg.MaxConns = 1
			cfg.ConnConfig.DialFunc = rt.Dial
			cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			var store inbox.Store = newPgxStore(t, pool, inbox.PostgresConfig{})
			ledger := newPgLedger(t, pool)
			ctx := context.Background()
			if tt.tenant {
				tenant := store
				store = newTenantStoreWith(t, func(context.Context, string) (inbox.Tenant, error) { return inbox.Tenant{Store: tenant}, nil })
				ctx = inbox.ContextWithTenant(ctx, "acme")
			}
			ib := newTestInbox(t, store, inbox.Config{MaxAttempts: tt.maxAttempts, RecentKeys: tt.recentKeys})
			credit := func(key string) (bool, error) { return creditOnce(ctx, ib, ledger, "billing", key, 1) }
			again := credit // a duplicate
			if tt.hinted {
				again = func(key string) (bool, error) {
					return creditOnce(inbox.ContextWithReplayHint(ctx), ib, ledger, "billing", key, 1)
				}
			}
			boom := errors.New("boom")
			fail := func(key string) error {
				_, err := ib.Process(ctx, "billing", key, func(ctx context.Context) error {
					return errors.Join(ledger.credit(ctx, 1), boom)
				})
				return err
			}
			// Warm up: the connection, and pgx's statement cache.
			_, err = credit("warm-up")
			require.NoError(t, err)
			_, err = again("warm-up")
			require.NoError(t, err)
			require.ErrorIs(t, fail("warm-up-failing"), boom)

			rt.N.Store(0)
			dup, err := credit("counted")
			require.NoError(t, err)
			require.False(t, dup)
			first := rt.N.Swap(0)
			dup, err = again("counted")
			require.NoError(t, err)
			require.True(t, dup)
			duplicate := rt.N.Swap(0)
			require.ErrorIs(t, fail("failing"), boom)
			failed := rt.N.Swap(0)
			t.Logf("MaxAttempts %d: %d round trips for a first delivery, %d for a duplicate, %d for a failure (%s)",
				tt.maxAttempts, first, duplicate, failed, tt.why)
			require.Equal(t, [3]int64{tt.first, tt.dup, tt.failed}, [3]int64{first, duplicate, failed}, tt.why)
		})
	}
}
