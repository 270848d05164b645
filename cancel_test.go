package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// canceller cancels a message context when the step-th statement sent with it starts,
// so that a test can end the context before each statement of a claim in turn.
type canceller struct {
	mu           sync.Mutex
	step, seen   int
	cancel       context.CancelFunc
	cancelledAt  int
	cancelledSQL string
}

type cancellerKey struct{}

// stepTracer counts the statements whose context carries a canceller (pgx tracer, for
// pgx and for pgx's database/sql driver).
type stepTracer struct{}

func (stepTracer) count(ctx context.Context, sql string) {
	c, ok := ctx.Value(cancellerKey{}).(*canceller)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen++
	if c.seen == c.step {
		c.cancelledAt, c.cancelledSQL = c.seen, sql
		c.cancel()
	}
}

func (t stepTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	t.count(ctx, data.SQL)
	return ctx
}
func (stepTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (t stepTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.count(ctx, "batch")
	return ctx
}
func (stepTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (stepTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A message context that ends before any one statement of its processing — attempt
// count, begin, claim, lock bound, the handler's write, output, commit — leaves nothing
// half-done: it either committed once or not at all, the redelivery then is a duplicate
// or is processed once, the handle stays usable (a *pgx.Conn too) and the session keeps
// its own lock_timeout. Every step is cancelled in turn until a run needs none.
func TestContextCancelledAtEveryStep(t *testing.T) {
	t.Parallel()
	dsn := pgDSN(t, nil)
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.Tracer = stepTracer{}
	poolCfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	poolCfg.ConnConfig.Tracer = stepTracer{}

	handles := []struct {
		name string
		sql  bool // the store's transactions are *sql.Tx
		open func(t *testing.T, table string, opts storeOpts) inbox.Store
	}{
		{"pgx", false, func(t *testing.T, table string, opts storeOpts) inbox.Store {
			pool, err := pgxpool.NewWithConfig(context.Background(), poolCfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			return newPgxStore(t, pool, inbox.PostgresConfig{Table: table, LockTimeout: opts.lockTimeout})
		}},
		{"pgx-conn", false, func(t *testing.T, table string, opts storeOpts) inbox.Store {
			newPgxStore(t, pgPool(t), inbox.PostgresConfig{Table: table})
			return &reconnectingStore{t: t, open: func() (*pgx.Conn, inbox.Store) {
				conn, err := pgx.ConnectConfig(context.Background(), cfg)
				require.NoError(t, err)
				t.Cleanup(func() { _ = conn.Close(context.Background()) })
				s, err := inbox.NewPostgresStore(conn, inbox.PostgresConfig{Table: table, LockTimeout: opts.lockTimeout})
				require.NoError(t, err)
				return conn, s
			}}
		}},
		{"sqlpostgres", true, func(t *testing.T, table string, opts storeOpts) inbox.Store {
			db := stdlib.OpenDB(*cfg)
			t.Cleanup(func() { _ = db.Close() })
			return newSQLPostgresStore(t, db, inbox.SQLPostgresConfig{Table: table, LockTimeout: opts.lockTimeout})
		}},
	}
	configs := []struct {
		name string
		cfg  inbox.Config
		opts storeOpts
	}{
		{"Plain", inbox.Config{}, storeOpts{}},
		{"MaxAttemptsAndLockTimeout", inbox.Config{MaxAttempts: 3}, storeOpts{lockTimeout: 2e9}},
	}
	for _, h := range handles {
		for _, c := range configs {
			t.Run(h.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				store := h.open(t, tableName("inbox"), c.opts)
				if r, ok := store.(*reconnectingStore); ok {
					r.reconnectIfClosed()
				}
				var l ledger = newPgLedger(t, pgPool(t))
				if h.sql {
					l = newSQLLedger(t, sqlPostgresDB(t), false)
				}
				ib := newTestInbox(t, store, c.cfg)
				credit := func(ctx context.Context) error {
					tx, err := inbox.RequireTx[any](ctx)
					if err != nil {
						return err
					}
					v, err := pgLockProbe.read(ctx, tx)
					if err != nil {
						return err
					}
					if v != pgSessionLock {
						return fmt.Errorf("lock_timeout in the handler is %q, want the session's %q", v, pgSessionLock)
					}
					return l.credit(ctx, 1)
				}
				steps := 0
				for step := 1; ; step++ {
					key := fmt.Sprint("order-", step)
					ctx, cancel := context.WithCancel(context.Background())
					can := &canceller{step: step, cancel: cancel}
					_, err := ib.Process(context.WithValue(ctx, cancellerKey{}, can), "billing", key, credit)
					cancel()
					if can.cancelledAt == 0 { // the run ended before this step: every step was tried
						require.NoError(t, err)
						steps = step - 1
						break
					}
					// The inbox's own failures say the context ended; a handler's statement that
					// failed comes back as the handler's error, unchanged.
					inHandler := strings.HasPrefix(can.cancelledSQL, "SHOW") || strings.HasPrefix(can.cancelledSQL, "INSERT INTO \"ledger")
					if err != nil && !inHandler {
						require.True(t, errors.Is(err, context.Canceled), "step %d (%s): %v", step, can.cancelledSQL, err)
					}
					if r, ok := store.(*reconnectingStore); ok {
						r.reconnectIfClosed()
					}
					dup, err := ib.Process(context.Background(), "billing", key, credit)
					require.NoError(t, err, "redelivery after step %d (%s)", step, can.cancelledSQL)
					_, credits := l.balance(t)
					require.Equal(t, step, credits, "step %d (%s): exactly one credit per message (redelivery duplicate: %v)", step, can.cancelledSQL, dup)
					require.Less(t, step, 50, "a run should need far fewer statements")
				}
				require.Positive(t, steps)
				t.Logf("cancelled before each of %d statements", steps)
				if r, ok := store.(*reconnectingStore); ok {
					t.Logf("pgx closed the *pgx.Conn %d times (a BEGIN or COMMIT whose context ended as it was sent); the application reconnected", r.reconnects)
				}
			})
		}
	}
}

// reconnectingStore is a PostgresStore over one *pgx.Conn that reconnects, as an
// application on a single connection must, once pgx closed the connection: pgx closes
// it when a BEGIN or a COMMIT fails on a context that ended (pgx's own rule), and when a
// statement is cancelled midway.
type reconnectingStore struct {
	inbox.Store
	t          *testing.T
	open       func() (*pgx.Conn, inbox.Store)
	conn       *pgx.Conn
	reconnects int
}

func (r *reconnectingStore) reconnectIfClosed() {
	if r.conn == nil || r.conn.IsClosed() {
		if r.conn != nil {
			r.reconnects++
		}
		r.conn, r.Store = r.open()
	}
}
