package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// TenantConfig configures a TenantStore.
type TenantConfig struct {
	// Lookup opens one tenant's store: a pool on the tenant's database and a store on
	// it, a store on the tenant's schema of a shared pool (PostgresConfig.Schema), or a
	// redisstore on the tenant's key prefix. The TenantStore calls it the first time the
	// tenant is used and keeps what it returns until Remove or Close: once per tenant,
	// also when calls for a new tenant race, and without holding a lock that other
	// tenants' calls wait on. Its ctx carries the tenant and the values of the call that
	// asked first, but not its cancellation; it ends after OpenTimeout.
	//
	// For a tenant that does not exist, return an error wrapping ErrUnknownTenant (or a
	// Tenant without a Store): the call then fails with ErrUnknownTenant, which is
	// permanent, and nothing is cached, so that a tenant created later is found. Any
	// other error is transient: nothing is cached, and the next call tries again. So is a
	// panic, which the TenantStore recovers (Lookup runs on a goroutine of its own, where
	// no recover of the caller's could) and returns to the waiting calls as an error
	// naming where it panicked. A Tenant returned with an error is closed (Tenant.Close),
	// never kept. Never return another tenant's store, or a default one, for a tenant you
	// do not know. Required.
	Lookup func(ctx context.Context, tenant string) (Tenant, error)

	// Tenants lists the tenants, for the operations across tenants: Purge and
	// PurgeEvery (PurgeTenants), CreateSchema, Stats, ForEachTenant and Verify (which
	// New calls) with no tenant in the context. It is called at each such operation, so
	// tenants added since are included. Defaults to nil: Verify then checks no tenant up
	// front (a tenant's missing tables show at its first message), and the other
	// operations fail, saying to set it.
	Tenants func(ctx context.Context) ([]string, error)

	// Parallelism bounds how many tenants an operation across tenants works on at
	// once. Defaults to DefaultTenantParallelism (4).
	Parallelism int

	// OpenTimeout bounds each call of Lookup: its ctx ends then, and a Lookup that has
	// not returned by then (one that does not heed its ctx) is abandoned: the calls
	// waiting for it fail with a transient error wrapping context.DeadlineExceeded, the
	// tenant's next call fails the same way, without starting another Lookup, until the
	// abandoned one returns, and what that one returns is closed (Tenant.Close). Defaults
	// to DefaultTenantOpenTimeout (30s).
	OpenTimeout time.Duration
}

// Defaults of TenantConfig.
const (
	DefaultTenantParallelism = 4
	DefaultTenantOpenTimeout = 30 * time.Second
)

// Tenant is one tenant's store, as TenantConfig.Lookup returns it.
type Tenant struct {
	// Store is the tenant's store. Required.
	Store Store
	// Close releases what Lookup opened for this tenant alone: its pool, its client.
	// Leave it nil when there is nothing of the tenant's own (a schema or a key prefix
	// on a shared pool). The TenantStore calls it once, after Remove or Close, when the
	// calls in flight on the tenant's store, open transactions included, have ended; or
	// at once when the Tenant is not kept: Lookup returned it with an error or without a
	// Store, or after OpenTimeout.
	Close func()
}

// TenantStore is a Store that routes each call to the store of the tenant in the call's
// context (ContextWithTenant; the middleware puts it there from Config.Tenant): a
// database, a schema, or a key prefix per tenant, behind one Inbox. The stores behind
// it stay unaware of tenants. A call without a tenant fails with ErrNoTenant, and one
// whose tenant Lookup does not know with ErrUnknownTenant, before anything is written:
// a message is never processed on a default database.
//
// Each tenant's store is opened by TenantConfig.Lookup on first use, once, and kept
// until Remove or Close, so tenants can be added while the consumer runs. Purge,
// PurgeEvery, CreateSchema, Stats and Verify without a tenant in the context run on
// every tenant listed by TenantConfig.Tenants (see ForEachTenant).
//
// Joined transactions: the transaction in the message context must be on the tenant's
// database (for a schema per tenant, any transaction of the shared server: the key goes
// to the tenant's schema-qualified table). The TenantStore cannot check that.
type TenantStore struct {
	cfg TenantConfig

	mu      sync.RWMutex
	tenants map[string]*tenantEntry
	// abandoned holds the tenants whose last Lookup ran past OpenTimeout and has not
	// returned yet: no other Lookup of theirs starts until it has (tenantstore_open.go).
	abandoned map[string]struct{}
	closed    bool
}

var (
	_ Store          = (*TenantStore)(nil)
	_ AttemptCounter = (*TenantStore)(nil)
)

// tenantEntry is one tenant's store, open or being opened.
type tenantEntry struct {
	name  string
	ready chan struct{} // closed once Lookup returned
	ok    atomic.Bool   // set before ready closes when Lookup gave a store
	t     Tenant
	err   error // Lookup's error, set before ready closes
	// inFlight counts the calls and open transactions on t.Store. Add happens under
	// TenantStore.mu's read lock while the entry is in the map, so that once Remove has
	// taken it out, Wait sees every call that can reach the store.
	inFlight sync.WaitGroup
}

// NewTenantStore returns a TenantStore. It checks the config; no tenant is opened
// before its first use.
func NewTenantStore(cfg TenantConfig) (*TenantStore, error) {
	var errs []error
	if cfg.Lookup == nil {
		errs = append(errs, errors.New("Lookup is nil: set it to a func that opens a tenant's store, and returns an error wrapping inbox.ErrUnknownTenant for a tenant it does not know"))
	}
	if cfg.Parallelism < 0 {
		errs = append(errs, fmt.Errorf("Parallelism is %d: use a positive number of tenants, or 0 for the default %d", cfg.Parallelism, DefaultTenantParallelism))
	}
	if cfg.OpenTimeout < 0 {
		errs = append(errs, fmt.Errorf("OpenTimeout is %v: use a positive duration, or 0 for the default %v", cfg.OpenTimeout, DefaultTenantOpenTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("inbox: invalid tenant store config: %w", err)
	}
	if cfg.Parallelism == 0 {
		cfg.Parallelism = DefaultTenantParallelism
	}
	if cfg.OpenTimeout == 0 {
		cfg.OpenTimeout = DefaultTenantOpenTimeout
	}
	return &TenantStore{cfg: cfg, tenants: map[string]*tenantEntry{}, abandoned: map[string]struct{}{}}, nil
}

// errTenantStoreClosed is returned by calls on a closed TenantStore.
var errTenantStoreClosed = errors.New("inbox: the TenantStore is closed")

// use returns the entry of the tenant in ctx with a reference taken: the caller ends it
// with inFlight.Done.
func (s *TenantStore) use(ctx context.Context, what string) (*tenantEntry, error) {
	tenant, ok := TenantFromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("inbox: %s: %w in the context: the store routes by tenant; the middleware puts the tenant there from Config.Tenant, and callers of Process, ProcessResult and Forget with inbox.ContextWithTenant", what, ErrNoTenant)
	}
	return s.get(ctx, tenant)
}

// get returns tenant's entry, opened, with a reference taken.
func (s *TenantStore) get(ctx context.Context, tenant string) (*tenantEntry, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, contract.Wrap(fmt.Sprintf("tenant %q", tenant), err)
	}
	for {
		s.mu.RLock()
		if s.closed {
			s.mu.RUnlock()
			return nil, errTenantStoreClosed
		}
		e := s.tenants[tenant]
		if e != nil && e.ok.Load() {
			e.inFlight.Add(1)
			s.mu.RUnlock()
			return e, nil
		}
		s.mu.RUnlock()
		if e == nil {
			var err error
			if e, err = s.open(ctx, tenant); err != nil {
				return nil, err
			}
		}
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("inbox: tenant %q: waiting for its store to open: %w", tenant, context.Cause(ctx))
		}
		if e.err != nil {
			return nil, e.err
		}
		// Opened: take the reference under the lock, unless Remove took it out meanwhile.
	}
}

// Remove closes a tenant's store: the next call for the tenant opens it again through
// Lookup (which may now say it is unknown). Calls in flight on the old store, and its
// open transactions, finish first; then Tenant.Close runs. Remove waits for that at most
// until ctx ends, after which the close still happens, later. Removing a tenant that is
// not open does nothing.
func (s *TenantStore) Remove(ctx context.Context, tenant string) error {
	s.mu.Lock()
	e := s.tenants[tenant]
	delete(s.tenants, tenant)
	s.mu.Unlock()
	if e == nil {
		return nil
	}
	select {
	case <-retire(e):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("inbox: tenant %q: removed, and its store closes once the calls in flight end: %w", tenant, context.Cause(ctx))
	}
}

// Close closes every tenant's store, as Remove does, once the calls in flight on them
// ended, and makes later calls fail. It waits for all of them.
func (s *TenantStore) Close() error {
	s.mu.Lock()
	entries := s.tenants
	s.tenants = map[string]*tenantEntry{}
	s.closed = true
	s.mu.Unlock()
	var done []<-chan struct{}
	for _, e := range entries {
		done = append(done, retire(e))
	}
	for _, d := range done {
		<-d
	}
	return nil
}

// retire closes e's store once its Lookup returned and its calls in flight ended, in the
// background, and returns a channel closed when that is done. e is out of the map.
func retire(e *tenantEntry) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-e.ready
		if !e.ok.Load() {
			return
		}
		e.inFlight.Wait()
		if e.t.Close != nil {
			e.t.Close()
		}
	}()
	return done
}

// Open reports the tenants whose stores are open now, in no particular order.
func (s *TenantStore) Open() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, 0, len(s.tenants))
	for name, e := range s.tenants {
		if e.ok.Load() {
			names = append(names, name)
		}
	}
	return names
}
