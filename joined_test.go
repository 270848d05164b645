package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// A joined transaction holds a connection of the pool; counting an attempt beside it
// needs a second one. With a pool of one there is none: the message fails with
// ErrAttemptsNeedConn, nothing written, instead of waiting until its context ends.
func TestJoinedMaxAttempts_PoolOfOneFailsClearly(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(postgresDSN())
	require.NoError(t, err)
	cfg.MaxConns = 1
	pgOne, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pgOne.Close)
	sqlPGOne := sqlPostgresDB(t)
	sqlPGOne.SetMaxOpenConns(1)
	mariaOne := mariaDB(t)
	mariaOne.SetMaxOpenConns(1)

	cases := []struct {
		name  string
		store inbox.Store
		l     ledger
		begin func(t *testing.T) (any, func(bool) error)
	}{
		{"pgx", newPgxStore(t, pgOne, inbox.PostgresConfig{}), newPgLedger(t, pgPool(t)), pgxBegin(pgOne)},
		{"sqlpostgres", newSQLPostgresStore(t, sqlPGOne, inbox.SQLPostgresConfig{}), newSQLLedger(t, sqlPostgresDB(t), false), sqlBegin(sqlPGOne)},
		{"mariadb", newMySQLStore(t, mariaOne, inbox.MySQLConfig{}), newSQLLedger(t, mariaDB(t), true), sqlBegin(mariaOne)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a guard only: the test must not reach it
			defer cancel()
			ib := newTestInbox(t, c.store, inbox.Config{MaxAttempts: 3})
			tx, end := c.begin(t)
			t.Cleanup(func() { _ = end(false) }) // also when a check fails: the pool of one needs it back
			calls := 0
			_, err := ib.Process(inbox.ContextWithTx(ctx, tx), "billing", "order-1", func(context.Context) error {
				calls++
				return nil
			})
			require.ErrorIs(t, err, inbox.ErrAttemptsNeedConn)
			require.NoError(t, ctx.Err(), "it failed on its own bound, not on the message context")
			require.Regexp(t, "MaxConns|SetMaxOpenConns", err.Error(), "the error says what to change")
			require.Zero(t, calls)
			require.NoError(t, end(false))
			total, _ := c.l.balance(t)
			require.Zero(t, total)

			// Without a joined transaction the pool of one serves the same message.
			dup, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error { calls++; return nil })
			require.NoError(t, err)
			require.False(t, dup)
			require.Equal(t, 1, calls)
		})
	}
}
