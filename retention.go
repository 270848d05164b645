package inbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// DefaultRetentionInterval is RetentionConfig.Interval's default.
const DefaultRetentionInterval = time.Hour

// PurgeTurns is an optional Store ability: a turn at purging the store's table that one
// holder at a time gets, from a lock the database gives and drops when the holder's
// process dies (its methods are documented in internal/contract). Retention needs it.
// The stores of this module have it: postgresstore (a session advisory lock), mysqlstore
// (GET_LOCK), sqlitestore (a byte lock of a file), redisstore (a turn that purges
// nothing: Redis expires keys by itself), and TenantStore in the tenant of the context.
type PurgeTurns = contract.PurgeTurns

// PurgeTurn is a purge turn held: see PurgeTurns.
type PurgeTurn = contract.PurgeTurn

// PurgeCounter is an optional Store ability: what a purge would delete (`inbox purge
// --dry-run`). The stores of this module have it, and TenantStore in the tenant of the
// context.
type PurgeCounter = contract.PurgeCounter

// ErrPurgeTurnBehindPooler means a purge turn was asked of a PostgreSQL store whose
// connections go through a pooler in transaction mode (PgBouncer): the turn is a session
// lock, which such a pooler leaves on a server connection that other clients then use.
// Give the Retention a store of its own, on the same table, connected to PostgreSQL
// directly. Permanent: the purge fails the same way until the deployment changes.
var ErrPurgeTurnBehindPooler = contract.ErrPurgeTurnBehindPooler

// RetentionConfig configures a Retention. Pass it to NewRetention, which applies the
// defaults and validates it.
type RetentionConfig struct {
	// Store is the store whose keys to purge: the inbox's, or a store of its own on the
	// same table. It must have purge turns (PurgeTurns); a TenantStore's tenants' stores
	// must, each in turn. Required.
	Store Store

	// Purge is how each run purges, as Purge does: OlderThan (required) and the
	// MinRetention guard (ErrRetention), Force, BatchSize, Pause, Progress (called per
	// run; per tenant and from several goroutines at once on a TenantStore) and Logger,
	// which logs each run.
	Purge PurgeConfig

	// Interval is the time between two runs of this process. A run that finds the turn
	// held by another process does nothing, and the next is an Interval later: a purge
	// killed midway is taken over within about an Interval. Defaults to
	// DefaultRetentionInterval (1h).
	Interval time.Duration

	// Jitter spreads the runs of a fleet: the first run waits a random share of Jitter,
	// and each next one Interval plus a random share of it. Defaults to Interval/10; a
	// negative Jitter means none.
	Jitter time.Duration

	// Name tells apart, in logs and metrics, the retentions of one process that purge
	// different tables (e.g. the table's name): RetentionRun.Name. Defaults to "".
	Name string

	// Observer receives each run (RetentionRun): inboxprom.Observer and
	// inboxotel.Observer export purged rows, durations and the last success;
	// RetentionObserverFunc adapts a function of your own. Defaults to none.
	Observer RetentionObserver
}

// RetentionRun is what one run of a Retention did in one store: its store, or one
// tenant of a TenantStore.
type RetentionRun struct {
	// Name is RetentionConfig.Name.
	Name string
	// Tenant is the tenant the run purged, on a TenantStore; "" otherwise.
	Tenant string
	// Turn reports that this process held the purge turn and purged. False: another
	// process held it and nothing ran (not a failure), or taking it failed (Err).
	Turn bool
	// Keys and Attempts count the keys and attempt rows deleted, also when the run
	// failed midway.
	Keys, Attempts int64
	// Start is when the run began; Duration is how long it held the turn and purged
	// (zero without the turn).
	Start    time.Time
	Duration time.Duration
	// Err is why the run failed or did not finish, nil when it ran to the end or found
	// the turn held.
	Err error
}

// The results of a RetentionRun, as Result names them in metrics.
const (
	RetentionPurged  = "purged"  // it held the turn and purged to the end
	RetentionSkipped = "skipped" // another process held the turn: nothing ran
	RetentionFailed  = "failed"  // taking the turn or purging failed (Err)
)

// Result says how the run ended: RetentionPurged, RetentionSkipped or RetentionFailed.
func (r RetentionRun) Result() string {
	switch {
	case r.Err != nil:
		return RetentionFailed
	case !r.Turn:
		return RetentionSkipped
	}
	return RetentionPurged
}

// RetentionObserver receives each run of a Retention, after its turn ended.
type RetentionObserver interface {
	ObserveRetention(ctx context.Context, run RetentionRun)
}

// RetentionObserverFunc adapts a function to RetentionObserver.
type RetentionObserverFunc func(ctx context.Context, run RetentionRun)

// ObserveRetention implements RetentionObserver.
func (f RetentionObserverFunc) ObserveRetention(ctx context.Context, run RetentionRun) { f(ctx, run) }

// Retention is a purge that runs itself, in a fleet of processes one at a time: each run
// takes the purge turn of the store's table (PurgeTurns: a lock of the database's,
// dropped when its holder dies), purges as Purge does on the turn's own session, and
// gives the turn back; a process that finds the turn held skips the run. A killed purger
// loses its turn at once and another process takes it at its next run. The library
// starts no goroutine: run it in one of yours, next to the router.
type Retention struct {
	cfg RetentionConfig
}

// NewRetention returns a Retention. It fails when the config is invalid, naming the
// field, and with ErrRetention when Purge.OlderThan is below Purge.MinRetention without
// Force.
func NewRetention(cfg RetentionConfig) (*Retention, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultRetentionInterval
	}
	switch {
	case cfg.Jitter == 0:
		cfg.Jitter = cfg.Interval / 10
	case cfg.Jitter < 0:
		cfg.Jitter = 0
	}
	cfg.Purge.setDefaults()
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("Store is nil: pass the Store the inbox uses, or one of its own on the same table"))
	} else if _, ok := cfg.Store.(PurgeTurns); !ok {
		errs = append(errs, fmt.Errorf("Store (%T) has no purge turns (inbox.PurgeTurns), which keep a fleet's purges one at a time: purge it with PurgeEvery in one process, or with `inbox purge` from one cron", cfg.Store))
	}
	if cfg.Interval < 0 {
		errs = append(errs, fmt.Errorf("Interval is %v: use a positive duration, or 0 for the default %v", cfg.Interval, DefaultRetentionInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("inbox: invalid retention config: %w", err)
	}
	if err := cfg.Purge.validate(); err != nil {
		return nil, err
	}
	return &Retention{cfg: cfg}, nil
}

// Run purges after a random share of Jitter, then every Interval (plus a random share of
// Jitter), until ctx ends; it then returns nil. Each run is Purge's: a failed run is
// logged, observed and tried again at the next one.
//
//	r, err := inbox.NewRetention(inbox.RetentionConfig{Store: store, Purge: inbox.PurgeConfig{OlderThan: 30 * 24 * time.Hour}})
//	go func() { _ = r.Run(ctx) }()
func (r *Retention) Run(ctx context.Context) error {
	wait := r.jitter()
	for {
		if sleep(ctx, wait) != nil {
			return nil
		}
		_, _ = r.Purge(ctx)
		wait = r.cfg.Interval + r.jitter()
	}
}

// jitter returns a random share of Jitter.
func (r *Retention) jitter() time.Duration {
	if r.cfg.Jitter <= 0 {
		return 0
	}
	return rand.N(r.cfg.Jitter)
}

// Purge runs once what Run runs at each interval: it takes the turn, purges, gives the
// turn back, logs and observes the run, and returns it. On a TenantStore, with no tenant
// in ctx, it runs in every tenant (TenantConfig.Parallelism at once), each with its own
// turn, and returns a run per tenant, sorted by tenant; with a tenant in ctx, in that
// one. A turn held by another process is a run with Turn false, not an error; the error
// joins the runs that failed.
func (r *Retention) Purge(ctx context.Context) ([]RetentionRun, error) {
	before := time.Now().Add(-r.cfg.Purge.OlderThan)
	ts, every := routesTenants(ctx, r.cfg.Store)
	if !every {
		tenant, _ := TenantFromContext(ctx)
		run := r.run(ctx, tenant, r.cfg.Store, before)
		return []RetentionRun{run}, run.Err
	}
	var mu sync.Mutex
	runs := map[string]RetentionRun{}
	results, err := ts.each(ctx, func(ctx context.Context, tenant string, store Store) (int64, error) {
		run := r.run(ctx, tenant, store, before)
		mu.Lock()
		runs[tenant] = run
		mu.Unlock()
		return run.Keys, run.Err
	})
	if err != nil { // the tenants could not be listed
		r.cfg.Purge.Logger.Error("inbox: purge failed, trying again at the next interval", err, watermill.LogFields{"retention": r.cfg.Name})
		return nil, err
	}
	out := make([]RetentionRun, len(results))
	var errs []error
	for i, res := range results {
		run, ok := runs[res.tenant]
		if !ok { // the tenant's store did not open, or ctx ended first
			run = RetentionRun{Name: r.cfg.Name, Tenant: res.tenant, Start: time.Now(), Err: res.err}
			r.report(ctx, run)
		}
		run.Err = res.err // named after the tenant
		out[i] = run
		errs = append(errs, res.err)
	}
	return out, contract.Join(errs...)
}

// run is one run in store: take the turn, purge, give it back, report.
func (r *Retention) run(ctx context.Context, tenant string, store Store, before time.Time) RetentionRun {
	run := RetentionRun{Name: r.cfg.Name, Tenant: tenant, Start: time.Now()}
	defer func() { r.report(ctx, run) }()
	turns, ok := store.(PurgeTurns)
	if !ok {
		run.Err = fmt.Errorf("inbox: purging: %w: the store (%T) has no purge turns (inbox.PurgeTurns)", errors.ErrUnsupported, store)
		return run
	}
	turn, err := turns.TakePurgeTurn(ctx, r.cfg.Purge.Pause)
	if err != nil || turn == nil {
		run.Err = err
		return run
	}
	run.Turn = true
	n, err := purgeRows(ctx, turn, r.cfg.Purge, before)
	run.Duration = time.Since(run.Start)
	run.Keys, run.Attempts = n.Keys, n.Attempts
	run.Err = contract.Join(err, turn.Release(ctx))
	return run
}

// report logs and observes a run.
func (r *Retention) report(ctx context.Context, run RetentionRun) {
	fields := watermill.LogFields{"retention": r.cfg.Name, "older_than": r.cfg.Purge.OlderThan.String()}
	if run.Tenant != "" {
		fields["tenant"] = run.Tenant
	}
	switch {
	case run.Err != nil:
		fields = fields.Add(watermill.LogFields{"deleted": run.Keys, "attempts": run.Attempts, "took": run.Duration.String()})
		r.cfg.Purge.Logger.Error("inbox: purge failed, trying again at the next interval", run.Err, fields)
	case !run.Turn:
		r.cfg.Purge.Logger.Debug("inbox: purge turn held by another process, skipped", fields)
	default:
		fields = fields.Add(watermill.LogFields{"deleted": run.Keys, "attempts": run.Attempts, "took": run.Duration.String()})
		r.cfg.Purge.Logger.Info("inbox: purged keys", fields)
	}
	if r.cfg.Observer != nil {
		r.cfg.Observer.ObserveRetention(context.WithoutCancel(ctx), run)
	}
}
