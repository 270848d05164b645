package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// The Store methods of TenantStore: each finds the tenant in ctx, takes a reference on
// its store and hands the call over unchanged. Errors of the tenant's store are wrapped
// with the tenant's name.

// Claim implements Store on the store of the tenant in ctx.
func (s *TenantStore) Claim(ctx context.Context, rec Record) (Claim, error) {
	e, err := s.use(ctx, "claiming the key")
	if err != nil {
		return Claim{}, err
	}
	claim, err := e.t.Store.Claim(ctx, rec)
	return e.hold(claim, err)
}

// ClaimIn implements Store on the store of the tenant in ctx. tx must be a transaction
// on that tenant's database (see TenantStore).
func (s *TenantStore) ClaimIn(ctx context.Context, tx any, rec Record) (Claim, error) {
	e, err := s.use(ctx, "claiming the key")
	if err != nil {
		return Claim{}, err
	}
	claim, err := e.t.Store.ClaimIn(ctx, tx, rec)
	return e.hold(claim, err)
}

// ReadStored implements storedReader on the store of the tenant in ctx, when that store
// reads a stored row on its own (PostgreSQL, MySQL); for another (SQLite, Redis) found is
// false, and the claim decides.
func (s *TenantStore) ReadStored(ctx context.Context, rec Record) (Claim, bool, error) {
	e, err := s.use(ctx, "reading the stored key")
	if err != nil {
		return Claim{}, false, err
	}
	defer e.inFlight.Done()
	r, ok := e.t.Store.(contract.StoredReader)
	if !ok {
		return Claim{}, false, nil
	}
	claim, found, err := r.ReadStored(ctx, rec)
	return claim, found, e.wrap(err)
}

// EndAttempt implements Store on the store of the tenant in ctx.
func (s *TenantStore) EndAttempt(ctx context.Context, rec Record) error {
	e, err := s.use(ctx, "ending the attempt")
	if err != nil {
		return err
	}
	defer e.inFlight.Done()
	return e.wrap(e.t.Store.EndAttempt(ctx, rec))
}

// UnfinishedAttempts implements AttemptCounter: the tenant's in ctx or, without one,
// every tenant's summed per consumer. A tenant whose store cannot count (the Redis
// store) fails the call rather than count as none.
func (s *TenantStore) UnfinishedAttempts(ctx context.Context) (map[string]int64, error) {
	count := func(ctx context.Context, store Store) (map[string]int64, error) {
		if c, ok := store.(AttemptCounter); ok {
			return c.UnfinishedAttempts(ctx)
		}
		return nil, fmt.Errorf("its store (%T) cannot count unfinished attempts", store)
	}
	if _, ok := TenantFromContext(ctx); ok {
		e, err := s.use(ctx, "counting unfinished attempts")
		if err != nil {
			return nil, err
		}
		defer e.inFlight.Done()
		n, err := count(ctx, e.t.Store)
		return n, e.wrap(err)
	}
	var mu sync.Mutex
	sum := map[string]int64{}
	err := s.ForEachTenant(ctx, func(ctx context.Context, _ string, store Store) error {
		n, err := count(ctx, store)
		mu.Lock()
		defer mu.Unlock()
		for consumer, c := range n {
			sum[consumer] += c
		}
		return err
	})
	return sum, err
}

// Forget implements Store on the store of the tenant in ctx: the key is forgotten in that
// tenant only.
func (s *TenantStore) Forget(ctx context.Context, consumer, key string) (bool, error) {
	e, err := s.use(ctx, "forgetting the key")
	if err != nil {
		return false, err
	}
	defer e.inFlight.Done()
	found, err := e.t.Store.Forget(ctx, consumer, key)
	return found, e.wrap(err)
}

// PurgeBatch implements Store on the store of the tenant in ctx. Without a tenant it
// fails: Purge and PurgeEvery purge every tenant (PurgeTenants).
func (s *TenantStore) PurgeBatch(ctx context.Context, before time.Time, limit int) (Purged, error) {
	e, err := s.use(ctx, "purging (inbox.Purge and PurgeEvery purge every tenant)")
	if err != nil {
		return Purged{}, err
	}
	defer e.inFlight.Done()
	n, err := e.t.Store.PurgeBatch(ctx, before, limit)
	return n, e.wrap(err)
}

// Stats implements Store: the stats of the tenant in ctx, or, without one, every
// tenant's summed per consumer (the oldest key being the oldest of all).
func (s *TenantStore) Stats(ctx context.Context) ([]ConsumerStats, error) {
	if _, ok := TenantFromContext(ctx); ok {
		e, err := s.use(ctx, "reading stats")
		if err != nil {
			return nil, err
		}
		defer e.inFlight.Done()
		stats, err := e.t.Store.Stats(ctx)
		return stats, e.wrap(err)
	}
	var mu sync.Mutex
	sum := map[string]ConsumerStats{}
	err := s.ForEachTenant(ctx, func(ctx context.Context, _ string, store Store) error {
		stats, err := store.Stats(ctx)
		mu.Lock()
		defer mu.Unlock()
		for _, c := range stats {
			acc, seen := sum[c.Consumer]
			acc.Consumer = c.Consumer
			acc.Keys += c.Keys
			if !seen || c.Oldest.Before(acc.Oldest) {
				acc.Oldest = c.Oldest
			}
			sum[c.Consumer] = acc
		}
		return err
	})
	return sortedStats(sum), err
}

// Verify implements Store: it checks the tables of the tenant in ctx or, without one,
// of every tenant that TenantConfig.Tenants lists (none when it is nil), opening them.
func (s *TenantStore) Verify(ctx context.Context) error {
	if _, ok := TenantFromContext(ctx); ok {
		e, err := s.use(ctx, "checking the tables")
		if err != nil {
			return err
		}
		defer e.inFlight.Done()
		return e.wrap(e.t.Store.Verify(ctx))
	}
	if s.cfg.Tenants == nil {
		return nil
	}
	return s.ForEachTenant(ctx, func(ctx context.Context, _ string, store Store) error {
		return store.Verify(ctx)
	})
}

// schemaCreator is the optional interface of a store that creates its own tables.
type schemaCreator interface {
	CreateSchema(ctx context.Context) error
}

// CreateSchema creates the tables of the tenant in ctx or, without one, of every tenant
// TenantConfig.Tenants lists, through each tenant store's own CreateSchema
// (PostgresStore, SQLPostgresStore, MySQLStore). One tenant failing does not stop the
// others; the error names each that failed.
func (s *TenantStore) CreateSchema(ctx context.Context) error {
	create := func(ctx context.Context, tenant string, store Store) error {
		c, ok := store.(schemaCreator)
		if !ok {
			return fmt.Errorf("inbox: its store, a %T, has no CreateSchema method: create its tables with the store's own DDL", store)
		}
		return c.CreateSchema(ctx)
	}
	if tenant, ok := TenantFromContext(ctx); ok {
		e, err := s.use(ctx, "creating the schema")
		if err != nil {
			return err
		}
		defer e.inFlight.Done()
		return e.wrap(create(ctx, tenant, e.t.Store))
	}
	return s.ForEachTenant(ctx, create)
}

// hold returns claim with its transaction wrapped so that the reference on the tenant's
// store lasts until the transaction ends; a claim without one releases it now.
func (e *tenantEntry) hold(claim Claim, err error) (Claim, error) {
	if err != nil || claim.Tx == nil {
		e.inFlight.Done()
		return claim, e.wrap(err)
	}
	claim.Tx = &tenantTx{Tx: claim.Tx, e: e}
	return claim, nil
}

// wrap names the tenant in an error of its store; nil stays nil.
func (e *tenantEntry) wrap(err error) error {
	if err == nil {
		return nil
	}
	return contract.Wrap(fmt.Sprintf("tenant %q", e.name), err)
}

// tenantTx is a tenant store's transaction, holding a reference on the store until it
// ends (its Commit or Rollback returned), so that Remove closes the store only then.
type tenantTx struct {
	Tx
	e    *tenantEntry
	once sync.Once
}

func (t *tenantTx) Commit(ctx context.Context, output []byte) error {
	defer t.release()
	return t.e.wrap(t.Tx.Commit(ctx, output))
}

func (t *tenantTx) Rollback(ctx context.Context) error {
	defer t.release()
	return t.e.wrap(t.Tx.Rollback(ctx))
}

func (t *tenantTx) Abandon(ctx context.Context) error {
	defer t.release()
	return t.e.wrap(t.Tx.Abandon(ctx))
}

func (t *tenantTx) release() { t.once.Do(t.e.inFlight.Done) }

var (
	_ PurgeTurns   = (*TenantStore)(nil)
	_ PurgeCounter = (*TenantStore)(nil)
)

// CountPurge implements PurgeCounter on the store of the tenant in ctx. It fails with
// errors.ErrUnsupported when that store cannot count.
func (s *TenantStore) CountPurge(ctx context.Context, before time.Time) (Purged, error) {
	e, err := s.use(ctx, "counting what a purge would delete")
	if err != nil {
		return Purged{}, err
	}
	defer e.inFlight.Done()
	c, ok := e.t.Store.(PurgeCounter)
	if !ok {
		return Purged{}, e.wrap(fmt.Errorf("inbox: %w: the tenant's store (%T) cannot count what a purge would delete (inbox.PurgeCounter)", errors.ErrUnsupported, e.t.Store))
	}
	n, err := c.CountPurge(ctx, before)
	return n, e.wrap(err)
}

// TakePurgeTurn implements PurgeTurns on the store of the tenant in ctx: the turn is
// that tenant's table's. It fails with errors.ErrUnsupported when that store has none.
// The turn holds a reference on the tenant's store until Release.
func (s *TenantStore) TakePurgeTurn(ctx context.Context, idle time.Duration) (PurgeTurn, error) {
	e, err := s.use(ctx, "taking the purge turn")
	if err != nil {
		return nil, err
	}
	turns, ok := e.t.Store.(PurgeTurns)
	if !ok {
		e.inFlight.Done()
		return nil, e.wrap(fmt.Errorf("inbox: %w: the tenant's store (%T) has no purge turns (inbox.PurgeTurns)", errors.ErrUnsupported, e.t.Store))
	}
	turn, err := turns.TakePurgeTurn(ctx, idle)
	if err != nil || turn == nil {
		e.inFlight.Done()
		return nil, e.wrap(err)
	}
	return &tenantTurn{PurgeTurn: turn, e: e}, nil
}

// tenantTurn is a tenant store's purge turn, holding a reference on the store until
// Release.
type tenantTurn struct {
	PurgeTurn
	e    *tenantEntry
	once sync.Once
}

func (t *tenantTurn) PurgeBatch(ctx context.Context, before time.Time, limit int) (Purged, error) {
	n, err := t.PurgeTurn.PurgeBatch(ctx, before, limit)
	return n, t.e.wrap(err)
}

func (t *tenantTurn) Release(ctx context.Context) error {
	err := t.PurgeTurn.Release(ctx)
	t.once.Do(t.e.inFlight.Done)
	return t.e.wrap(err)
}
