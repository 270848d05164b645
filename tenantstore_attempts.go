package inbox

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// TenantStore's AttemptLister and its list of tenants, for an operator's page: the
// attempts' ages of the tenant in ctx or, without one, of every tenant summed per
// consumer; one tenant's attempts one by one.

var _ AttemptLister = (*TenantStore)(nil)

// AttemptAges implements AttemptLister: the tenant's in ctx or, without one, every
// listed tenant's summed per consumer (the oldest being the oldest of all). A tenant
// whose store cannot list its attempts (the Redis store) fails the call rather than
// count as none.
func (s *TenantStore) AttemptAges(ctx context.Context) ([]AttemptAge, error) {
	ages := func(ctx context.Context, store Store) ([]AttemptAge, error) {
		if l, ok := store.(AttemptLister); ok {
			return l.AttemptAges(ctx)
		}
		return nil, fmt.Errorf("its store (%T) cannot list its attempts (inbox.AttemptLister)", store)
	}
	if _, ok := TenantFromContext(ctx); ok {
		e, err := s.use(ctx, "reading the attempts' ages")
		if err != nil {
			return nil, err
		}
		defer e.inFlight.Done()
		a, err := ages(ctx, e.t.Store)
		return a, e.wrap(err)
	}
	var mu sync.Mutex
	sum := map[string]AttemptAge{}
	err := s.ForEachTenant(ctx, func(ctx context.Context, _ string, store Store) error {
		a, err := ages(ctx, store)
		mu.Lock()
		defer mu.Unlock()
		for _, c := range a {
			acc, seen := sum[c.Consumer]
			acc.Consumer = c.Consumer
			acc.Unfinished += c.Unfinished
			if !seen || c.Oldest.Before(acc.Oldest) {
				acc.Oldest = c.Oldest
			}
			sum[c.Consumer] = acc
		}
		return err
	})
	out := make([]AttemptAge, 0, len(sum))
	for _, a := range sum {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Consumer < out[j].Consumer })
	return out, err
}

// Attempts implements AttemptLister in the tenant in ctx. Without a tenant it fails
// with ErrNoTenant: a list of several tenants' attempts would not say whose each is.
func (s *TenantStore) Attempts(ctx context.Context, consumer string, limit int) ([]Attempt, error) {
	e, store, err := ability[AttemptLister](s, ctx, "listing the attempts", "cannot list its attempts (inbox.AttemptLister)")
	if err != nil {
		return nil, err
	}
	defer e.inFlight.Done()
	list, err := store.Attempts(ctx, consumer, limit)
	return list, e.wrap(err)
}

// Tenants returns the tenants TenantConfig.Tenants lists, sorted, without duplicates
// or empty names: the tenants the operations across tenants run on. It fails when
// TenantConfig.Tenants is nil.
func (s *TenantStore) Tenants(ctx context.Context) ([]string, error) {
	if s.cfg.Tenants == nil {
		return nil, errNoTenantList
	}
	names, err := s.cfg.Tenants(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: listing the tenants (TenantConfig.Tenants): %w", err)
	}
	return sortedUnique(names), nil
}
