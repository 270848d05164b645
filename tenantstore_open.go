package inbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Opening a tenant's store: one Lookup per tenant at a time, on a goroutine of its own,
// outside any lock. A Lookup that fails, panics or has not returned after OpenTimeout
// fails the calls waiting for it with a transient error, and nothing is cached; what an
// abandoned Lookup returns later is closed (ADR 144).

// open returns tenant's entry, inserting one and starting Lookup when there is none: the
// double check under the write lock makes one Lookup per tenant, which runs without
// the lock. While the tenant's last Lookup, abandoned after OpenTimeout, has not
// returned, it fails instead of starting another.
func (s *TenantStore) open(ctx context.Context, tenant string) (*tenantEntry, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errTenantStoreClosed
	}
	if e := s.tenants[tenant]; e != nil {
		s.mu.Unlock()
		return e, nil
	}
	if _, running := s.abandoned[tenant]; running {
		s.mu.Unlock()
		return nil, contract.Wrap(fmt.Sprintf("tenant %q", tenant), fmt.Errorf(
			"opening its store: its last TenantConfig.Lookup, abandoned after OpenTimeout (%v), has not returned yet, and the next starts once it has: the tenant directory hangs, or OpenTimeout is shorter than a Lookup takes: %w",
			s.cfg.OpenTimeout, context.DeadlineExceeded))
	}
	e := &tenantEntry{name: tenant, ready: make(chan struct{})}
	s.tenants[tenant] = e
	s.mu.Unlock()
	go s.lookup(context.WithoutCancel(ctx), e)
	return e, nil
}

// lookupResult is what one call of Lookup returned.
type lookupResult struct {
	t   Tenant
	err error
}

// lookup runs Lookup for e, on a goroutine of its own, and publishes the result: at
// once when it returns within OpenTimeout, or, when it has not by then, the timeout
// (abandon).
func (s *TenantStore) lookup(ctx context.Context, e *tenantEntry) {
	ctx, cancel := context.WithTimeout(ContextWithTenant(ctx, e.name), s.cfg.OpenTimeout)
	defer cancel()
	done := make(chan lookupResult, 1)
	go func() {
		t, err := s.callLookup(ctx, e.name)
		done <- lookupResult{t, err}
	}()
	var r lookupResult
	select {
	case r = <-done:
	case <-ctx.Done():
		select {
		case r = <-done: // it returned as its time ran out: take what it gave
		default:
			s.abandon(e, done)
			return
		}
	}
	if r.err == nil && r.t.Store == nil {
		r.err = fmt.Errorf("%w: TenantConfig.Lookup returned no store", ErrUnknownTenant)
	}
	if r.err != nil {
		closeTenant(r.t) // what came with an error is not kept
		if !errors.Is(r.err, ErrUnknownTenant) {
			r.err = fmt.Errorf("opening its store (TenantConfig.Lookup; the next call tries again): %w", r.err)
		}
		s.fail(e, r.err)
		return
	}
	e.t = r.t
	e.ok.Store(true)
	close(e.ready)
}

// callLookup calls Lookup and returns a panic of it as an error: Lookup runs on a
// goroutine of the TenantStore's, where no recover of the caller's (nor Watermill's
// Recoverer) could catch it, and the process would die. The error is transient, as
// Lookup's own errors are: a bug in the tenant directory's code says nothing about the
// message, which succeeds once the directory is fixed (ADR 144). It does not wrap the
// panic's value, so that a panic never reads as ErrUnknownTenant.
func (s *TenantStore) callLookup(ctx context.Context, tenant string) (t Tenant, err error) {
	defer func() {
		if v := recover(); v != nil {
			t, err = Tenant{}, fmt.Errorf("it panicked%s: %v", panicSite(), v)
		}
	}()
	return s.cfg.Lookup(ctx, tenant)
}

// panicSite returns " at file:line" of the function that panicked, for a deferred
// function that recovered it, so that a panic's error says where to look; "" when it
// cannot tell.
func panicSite() string {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(3, pcs) // from the panic: past runtime.Callers, panicSite and the deferred function
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf(" at %s:%d", filepath.Base(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}

// abandon fails e's callers once its Lookup ran past OpenTimeout, and marks the tenant
// so that no other Lookup of it starts until that one returns; what it returns then is
// closed.
func (s *TenantStore) abandon(e *tenantEntry, done <-chan lookupResult) {
	s.mu.Lock()
	s.abandoned[e.name] = struct{}{}
	s.mu.Unlock()
	s.fail(e, fmt.Errorf("opening its store: TenantConfig.Lookup did not return within OpenTimeout (%v), and was abandoned: what it returns later is closed, and the tenant is looked up again once it has returned: %w",
		s.cfg.OpenTimeout, context.DeadlineExceeded))
	go func() {
		r := <-done
		s.mu.Lock()
		delete(s.abandoned, e.name)
		s.mu.Unlock()
		closeTenant(r.t)
	}()
}

// fail publishes a failed Lookup to e's callers and takes e out of the map, so that the
// next call tries again.
func (s *TenantStore) fail(e *tenantEntry, err error) {
	e.err = contract.Wrap(fmt.Sprintf("tenant %q", e.name), err)
	s.mu.Lock()
	if s.tenants[e.name] == e {
		delete(s.tenants, e.name)
	}
	s.mu.Unlock()
	close(e.ready)
}

// closeTenant releases what a Lookup returned and the TenantStore does not keep.
func closeTenant(t Tenant) {
	if t.Close != nil {
		t.Close()
	}
}
