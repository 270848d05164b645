package inbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Operations across tenants: every tenant TenantConfig.Tenants lists, at most
// Parallelism at once; one failing does not stop the others.

// ForEachTenant calls fn with every tenant that TenantConfig.Tenants lists and its store,
// opening the stores not open yet, at most TenantConfig.Parallelism at once (fn must be
// safe for concurrent use). ctx passed to fn carries the tenant (TenantFromContext), so
// the store's calls and TenantStore's own route there. A tenant that fails to open, or
// for which fn fails, does not stop the others; the error joins every failure, each
// naming its tenant. Use it for what must run per tenant: migrations, checks, reports.
func (s *TenantStore) ForEachTenant(ctx context.Context, fn func(ctx context.Context, tenant string, store Store) error) error {
	results, err := s.each(ctx, func(ctx context.Context, tenant string, store Store) (int64, error) {
		return 0, fn(ctx, tenant, store)
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range results {
		errs = append(errs, r.err)
	}
	return contract.Join(errs...)
}

// errNoTenantList is the error of an operation across tenants without
// TenantConfig.Tenants.
var errNoTenantList = errors.New("inbox: an operation across tenants needs TenantConfig.Tenants, the list of tenants: set it, or call with one tenant in the context (inbox.ContextWithTenant)")

// tenantResult is what an operation did in one tenant.
type tenantResult struct {
	tenant string
	n      int64
	err    error // named after the tenant
}

// each runs fn on every listed tenant and returns one result per tenant, sorted by
// tenant; the error is the listing's.
func (s *TenantStore) each(ctx context.Context, fn func(ctx context.Context, tenant string, store Store) (int64, error)) ([]tenantResult, error) {
	names, err := s.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	results := make([]tenantResult, len(names))
	sem := make(chan struct{}, s.cfg.Parallelism)
	var wg sync.WaitGroup
	for i, tenant := range names {
		results[i].tenant = tenant
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			results[i].err = contract.Wrap(fmt.Sprintf("tenant %q", tenant), fmt.Errorf("not reached: %w", context.Cause(ctx)))
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			e, err := s.get(ctx, tenant)
			if err != nil {
				results[i].err = err
				return
			}
			defer e.inFlight.Done()
			n, err := fn(ContextWithTenant(ctx, tenant), tenant, e.t.Store)
			results[i].n, results[i].err = n, e.wrap(err)
		}()
	}
	wg.Wait()
	return results, nil
}

// sortedUnique returns names sorted, without duplicates or empty names.
func sortedUnique(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	j := 0
	for i, n := range out {
		if i == 0 || n != out[j-1] {
			out[j] = n
			j++
		}
	}
	return out[:j]
}

// sortedStats returns the per-consumer stats sorted by consumer.
func sortedStats(m map[string]ConsumerStats) []ConsumerStats {
	stats := make([]ConsumerStats, 0, len(m))
	for _, c := range m {
		stats = append(stats, c)
	}
	sort.Slice(stats, func(i, j int) bool { return stats[i].Consumer < stats[j].Consumer })
	return stats
}
