package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// MaxAttempts through PgBouncer in transaction mode (issue 20, ADR 96). An attempt holds
// a session advisory lock from its start to its end (ADR 60); through a transaction
// pooler the session is the server connection PgBouncer lends for one transaction, and
// it goes back to the pool, lock and all, whenever the client is between transactions.

// pgbouncerStores are the PostgreSQL stores on one table through PgBouncer, each opening
// a store of its kind on a handle of its own (as another process would).
func pgbouncerStores() []struct {
	name string
	open func(t *testing.T, table string) inbox.Store
} {
	pgxStore := func(mode string) func(t *testing.T, table string) inbox.Store {
		return func(t *testing.T, table string) inbox.Store {
			s, err := inbox.NewPostgresStore(pgPoolWith(t, pgbouncerDSN(t, map[string]string{"default_query_exec_mode": mode})), inbox.PostgresConfig{Table: table})
			require.NoError(t, err)
			return s
		}
	}
	return []struct {
		name string
		open func(t *testing.T, table string) inbox.Store
	}{
		{"pgx-exec", pgxStore("exec")},
		{"pgx-simple", pgxStore("simple_protocol")},
		{"pgx-exec-pool-of-one", func(t *testing.T, table string) inbox.Store {
			pool := pgPoolOf(t, pgbouncerDSN(t, map[string]string{"default_query_exec_mode": "exec"}), 1)
			s, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
			require.NoError(t, err)
			return s
		}},
		{"sqlpostgres-exec", func(t *testing.T, table string) inbox.Store {
			s, err := inbox.NewSQLPostgresStore(pgbouncerSQL(t), inbox.SQLPostgresConfig{Table: table})
			require.NoError(t, err)
			return s
		}},
		{"sqlpostgres-exec-conn", func(t *testing.T, table string) inbox.Store {
			conn, err := pgbouncerSQL(t).Conn(context.Background())
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			s, err := inbox.NewSQLPostgresStore(conn, inbox.SQLPostgresConfig{Table: table})
			require.NoError(t, err)
			return s
		}},
	}
}

// pgbouncerSQL opens a *sql.DB on pgx's driver through PgBouncer, in exec mode.
func pgbouncerSQL(t *testing.T) *sql.DB {
	return openSQL(t, "pgx", pgbouncerDSN(t, map[string]string{"default_query_exec_mode": "exec"}), "PgBouncer", "INBOX_PGBOUNCER_DSN")
}

// pgAttemptLockHeld reports whether a session of the server (reached directly) holds the
// advisory lock of attempt token tok.
func pgAttemptLockHeld(t *testing.T, tok string) bool {
	var held bool
	require.NoError(t, pgPool(t).QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted
		   AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, 0))`, tok).Scan(&held))
	return held
}

// TestPgBouncer_AttemptsRefusedBehindATransactionPooler: behind a transaction pooler the
// stores refuse to count attempts, at New (MaxAttempts, naming the field and what to do)
// and at a claim that carries an attempt (a store New never saw, such as a tenant's),
// with ErrAttemptsBehindPooler, transient; and they leave no advisory lock behind. Without
// MaxAttempts, nothing changes.
func TestPgBouncer_AttemptsRefusedBehindATransactionPooler(t *testing.T) {
	for _, s := range pgbouncerStores() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			table := tableName("inbox")
			store := s.open(t, table)
			require.NoError(t, store.(interface{ CreateSchema(context.Context) error }).CreateSchema(ctx))
			t.Cleanup(func() {
				_, _ = pgPool(t).Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize()+`, `+pgx.Identifier{table + "_attempts"}.Sanitize())
			})

			_, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: 3})
			require.ErrorIs(t, err, inbox.ErrAttemptsBehindPooler)
			require.ErrorContains(t, err, "MaxAttempts")
			require.False(t, inbox.Permanent(err), "a fault of the deployment, not of a message")

			// A claim with an attempt, on a store New never checked (another handle).
			other := s.open(t, table)
			tok := fmt.Sprintf("tok-%s-%s", s.name, table)
			_, err = other.Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-1", Attempt: tok})
			require.ErrorIs(t, err, inbox.ErrAttemptsBehindPooler)
			require.False(t, pgAttemptLockHeld(t, tok), "the refused claim left its attempt's lock on a server connection")

			ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
			require.NoError(t, err, "without MaxAttempts the pooler is fine")
			require.NotNil(t, ib)
		})
	}
}

// TestPgBouncer_AttemptsCountedOnADirectConnection is the control: the same check passes
// on PostgreSQL reached directly, through pgx and database/sql.
func TestPgBouncer_AttemptsCountedOnADirectConnection(t *testing.T) {
	ctx := context.Background()
	pool := pgPool(t)
	pgs := newPgxStore(t, pool, inbox.PostgresConfig{})
	_, err := inbox.New(inbox.Config{Store: pgs, Consumer: "billing", MaxAttempts: 3})
	require.NoError(t, err)
	db := sqlPostgresDB(t)
	sqs := newSQLPostgresStore(t, db, inbox.SQLPostgresConfig{})
	_, err = inbox.New(inbox.Config{Store: sqs, Consumer: "billing", MaxAttempts: 3})
	require.NoError(t, err)
	for _, store := range []inbox.Store{pgs, sqs} {
		tok := tableName("tok")
		c, err := store.Claim(ctx, inbox.Record{Consumer: "billing", Key: tok, Attempt: tok})
		require.NoError(t, err)
		require.True(t, pgAttemptLockHeld(t, tok), "the attempt's lock while it runs")
		require.NoError(t, c.Tx.Rollback(ctx))
		require.False(t, pgAttemptLockHeld(t, tok), "the attempt's lock after its clean end")
	}
}

// TestPgBouncer_AttemptsNeverLeakOrHideACrash: through PgBouncer in transaction mode,
// while other clients keep its server connections busy, deliveries that carry an
// attempt either are refused (ErrAttemptsBehindPooler) or count right: a clean end
// leaves no advisory lock on any server connection, and an abandoned attempt (a panic,
// counted as a crash) is counted by the next claim. Before ADR 96, database/sql's attempt
// start committed on its own, PgBouncer lent the server connection out with the lock,
// and the unlock ran elsewhere: every clean end leaked its lock and the abandoned attempt
// counted 0 (pgx's folded claim held one server connection throughout and counted right).
func TestPgBouncer_AttemptsNeverLeakOrHideACrash(t *testing.T) {
	for _, s := range pgbouncerStores() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			table := tableName("inbox")
			store := s.open(t, table)
			require.NoError(t, store.(interface{ CreateSchema(context.Context) error }).CreateSchema(ctx))
			t.Cleanup(func() {
				_, _ = pgPool(t).Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize()+`, `+pgx.Identifier{table + "_attempts"}.Sanitize())
			})
			// Other clients take whichever server connection is free, as in production.
			churn, stop := context.WithCancel(ctx)
			others := pgPoolWith(t, pgbouncerDSN(t, map[string]string{"default_query_exec_mode": "exec"}))
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					for churn.Err() == nil {
						_, _ = others.Exec(churn, "SELECT pg_sleep(0.002)")
					}
				})
			}
			t.Cleanup(func() { stop(); wg.Wait() })

			refused := 0
			for i := range 6 {
				tok := fmt.Sprintf("tok-%d-%s", i, table)
				c, err := store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-clean", Attempt: tok})
				if errors.Is(err, inbox.ErrAttemptsBehindPooler) {
					refused++
				} else {
					require.NoError(t, err)
					require.NoError(t, others.QueryRow(ctx, "SELECT 1").Scan(new(int))) // another client's transaction in between
					require.NoError(t, c.Tx.Rollback(ctx))
				}
				require.False(t, pgAttemptLockHeld(t, tok), "delivery %d: its attempt's lock outlived its clean end (leaked on a server connection PgBouncer lends to others)", i)
			}
			t.Logf("%d of 6 claims refused with ErrAttemptsBehindPooler", refused)

			tok := "tok-crash-" + table
			c, err := store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-crash", Attempt: tok})
			if errors.Is(err, inbox.ErrAttemptsBehindPooler) {
				return
			}
			require.NoError(t, err)
			require.NoError(t, c.Tx.Abandon(ctx)) // a panic: the attempt stays, as one that died
			c, err = s.open(t, table).Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-crash", Attempt: "tok-next-" + table})
			require.NoError(t, err)
			require.Equal(t, 1, c.Unfinished, "the abandoned attempt counted as one that died")
			require.NoError(t, c.Tx.Rollback(ctx))
		})
	}
}
