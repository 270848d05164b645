package inbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// TenantPurge is what a purge across tenants did in one tenant.
type TenantPurge struct {
	Tenant string
	// Deleted counts the keys deleted, also when the tenant's purge failed midway.
	Deleted int64
	// Err is why the tenant's purge failed or did not finish, naming the tenant; nil
	// when it ran to the end.
	Err error
}

// PurgeTenants purges every tenant of store that TenantConfig.Tenants lists, as Purge
// purges one store: in batches of cfg.BatchSize keys, each its own short transaction in
// the tenant's database, at most TenantConfig.Parallelism tenants at once. A tenant that
// fails (its database is down, its tables are missing) does not stop the others. It
// returns one TenantPurge per tenant, sorted by tenant, and an error that joins the
// failures, nil when every tenant was purged. The cutoff is computed once, from this
// process's clock, when PurgeTenants starts. cfg.Progress, when set, gets the keys
// deleted across all tenants so far, from one goroutine at a time.
//
// Purge and PurgeEvery call it for a TenantStore when their context carries no tenant.
func PurgeTenants(ctx context.Context, store *TenantStore, cfg PurgeConfig) ([]TenantPurge, error) {
	if store == nil {
		return nil, errors.New("inbox: invalid purge config: store is nil: pass the TenantStore the inbox uses")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	purges, err := purgeTenants(ctx, store, cfg, time.Now().Add(-cfg.OlderThan))
	if err != nil {
		return nil, err
	}
	return purges, purgeErr(purges)
}

func purgeTenants(ctx context.Context, store *TenantStore, cfg PurgeConfig, before time.Time) ([]TenantPurge, error) {
	if progress := cfg.Progress; progress != nil {
		var mu sync.Mutex
		var total int64
		cfg.Progress = nil // each tenant reports its batches below
		results, err := store.each(ctx, func(ctx context.Context, _ string, s Store) (int64, error) {
			var last int64
			tenantCfg := cfg
			tenantCfg.Progress = func(deleted int64) {
				mu.Lock()
				defer mu.Unlock()
				total += deleted - last
				last = deleted
				progress(total)
			}
			return purge(ctx, s, tenantCfg, before)
		})
		return tenantPurges(results), err
	}
	results, err := store.each(ctx, func(ctx context.Context, _ string, s Store) (int64, error) {
		return purge(ctx, s, cfg, before)
	})
	return tenantPurges(results), err
}

// tenantPurges turns each's results into TenantPurges, and the failures into one error.
func tenantPurges(results []tenantResult) []TenantPurge {
	out := make([]TenantPurge, len(results))
	for i, r := range results {
		out[i] = TenantPurge{Tenant: r.tenant, Deleted: r.n, Err: r.err}
	}
	return out
}

// purgeErr joins the failures of a purge across tenants.
func purgeErr(purges []TenantPurge) error {
	var errs []error
	for _, p := range purges {
		errs = append(errs, p.Err)
	}
	return contract.Join(errs...)
}

// routesTenants returns store as a TenantStore when an operation on it must run on
// every tenant: it is one, and ctx names no tenant.
func routesTenants(ctx context.Context, store Store) (*TenantStore, bool) {
	ts, ok := store.(*TenantStore)
	if !ok {
		return nil, false
	}
	_, one := TenantFromContext(ctx)
	return ts, !one
}

// purgeAny purges store, or each of its tenants, and logs a run of PurgeEvery's.
func purgeAny(ctx context.Context, store Store, cfg PurgeConfig, before time.Time) (int64, []TenantPurge, error) {
	ts, ok := routesTenants(ctx, store)
	if !ok {
		n, err := purge(ctx, store, cfg, before)
		return n, nil, err
	}
	purges, err := purgeTenants(ctx, ts, cfg, before)
	if err != nil { // the tenants could not be listed
		return 0, nil, err
	}
	var total int64
	for _, p := range purges {
		total += p.Deleted
	}
	return total, purges, purgeErr(purges)
}

// logTenantPurges logs each tenant whose purge failed in one run of PurgeEvery, and
// returns how many did.
func logTenantPurges(logger watermill.LoggerAdapter, purges []TenantPurge, fields watermill.LogFields) int {
	failed := 0
	for _, p := range purges {
		if p.Err != nil {
			failed++
			logger.Error("inbox: purge of a tenant failed, trying again at the next interval", p.Err,
				fields.Add(watermill.LogFields{"tenant": p.Tenant, "deleted": p.Deleted}))
		}
	}
	return failed
}
