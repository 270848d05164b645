package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// Purge and PurgeEvery on a TenantStore purge every tenant: one tenant that fails does
// not stop the others, and the result says what happened in each.

// fillTenants processes keys in every tenant of ts and waits until they are older than
// a purge of a millisecond's age.
func fillTenants(t *testing.T, ts *inbox.TenantStore, keys int) {
	ib := newTestInbox(t, ts, inbox.Config{})
	for _, tenant := range tenants {
		for i := range keys {
			_, err := ib.Process(inbox.ContextWithTenant(context.Background(), tenant), "billing", fmt.Sprint("order-", i), func(context.Context) error { return nil })
			require.NoError(t, err)
		}
	}
	time.Sleep(20 * time.Millisecond)
}

// keysIn returns the keys of tenant in ts.
func keysIn(t *testing.T, ts *inbox.TenantStore, tenant string) int64 {
	stats, err := ts.Stats(inbox.ContextWithTenant(context.Background(), tenant))
	require.NoError(t, err)
	var n int64
	for _, c := range stats {
		n += c.Keys
	}
	return n
}

func TestPurgeAcrossTenants(t *testing.T) {
	t.Parallel()
	for _, shape := range tenantShapes() {
		if !shape.sql {
			continue // Redis expires its keys: nothing to purge
		}
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			setup := shape.open(t)
			ts := setup.ts
			fillTenants(t, ts, 5)
			cfg := inbox.PurgeConfig{OlderThan: time.Millisecond, Force: true, BatchSize: 2}

			// With a tenant in the context, Purge purges that one.
			n, err := inbox.Purge(inbox.ContextWithTenant(ctx, "tenant-a"), ts, cfg)
			require.NoError(t, err)
			require.EqualValues(t, 5, n)
			require.Zero(t, keysIn(t, ts, "tenant-a"))
			require.EqualValues(t, 5, keysIn(t, ts, "tenant-b"))

			// Without, every tenant; tenant-b's tables are gone, the others are purged.
			fillTenants(t, ts, 5)
			setup.drop(t, "tenant-b")
			var mu sync.Mutex
			var progress []int64
			cfg.Progress = func(deleted int64) { mu.Lock(); progress = append(progress, deleted); mu.Unlock() }
			n, err = inbox.Purge(ctx, ts, cfg)
			require.ErrorIs(t, err, inbox.ErrNoTable)
			require.ErrorContains(t, err, `tenant "tenant-b"`)
			require.NotContains(t, err.Error(), `tenant "tenant-a"`)
			require.EqualValues(t, 10, n, "tenant-a's and tenant-c's keys")
			require.EqualValues(t, 10, progress[len(progress)-1], "Progress counts across tenants")
			require.Zero(t, keysIn(t, ts, "tenant-a"))
			require.Zero(t, keysIn(t, ts, "tenant-c"))

			// PurgeTenants reports each tenant (New would refuse the broken tenant now).
			cfg.Progress = nil
			purges, err := inbox.PurgeTenants(ctx, ts, cfg)
			require.Error(t, err)
			require.Len(t, purges, 3)
			for i, p := range purges {
				require.Equal(t, tenants[i], p.Tenant)
				require.Zero(t, p.Deleted)
				require.Equal(t, p.Tenant == "tenant-b", p.Err != nil, "%s: %v", p.Tenant, p.Err)
			}
		})
	}
}

func TestPurgeEveryAcrossTenants(t *testing.T) {
	t.Parallel()
	setup := openPgSchemasShape(t)
	ts := setup.ts
	fillTenants(t, ts, 3)
	setup.drop(t, "tenant-c")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := &runLogger{ran: make(chan struct{}, 1)}
	go func() {
		_ = inbox.PurgeEvery(ctx, ts, time.Hour, inbox.PurgeConfig{OlderThan: time.Millisecond, Force: true, Logger: logger})
	}()
	<-logger.ran
	cancel()
	logger.mu.Lock()
	defer logger.mu.Unlock()
	require.Len(t, logger.errors, 1, "one line per tenant that failed")
	require.Equal(t, "tenant-c", logger.errors[0]["tenant"])
	require.Equal(t, int64(6), logger.info[0]["deleted"], "the others were purged")
	require.Zero(t, keysIn(t, ts, "tenant-a"))
}

// runLogger records PurgeEvery's lines and signals each run's summary.
type runLogger struct {
	watermill.NopLogger
	mu     sync.Mutex
	info   []watermill.LogFields
	errors []watermill.LogFields
	ran    chan struct{}
}

func (l *runLogger) Info(msg string, fields watermill.LogFields) {
	l.mu.Lock()
	l.info = append(l.info, fields)
	l.mu.Unlock()
	select {
	case l.ran <- struct{}{}:
	default:
	}
}

func (l *runLogger) Error(msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, fields)
	if fields["tenant"] == nil { // a run that failed as a whole
		l.info = append(l.info, fields)
		select {
		case l.ran <- struct{}{}:
		default:
		}
	}
}
