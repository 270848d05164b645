package sqlc_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/_examples/orm/sqlc/mysqldb"
	"github.com/watermill-inbox/inbox/_examples/orm/sqlc/pgxdb"
	"github.com/watermill-inbox/inbox/_examples/orm/sqlc/sqlpgdb"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// database returns the test database of dialect.
func database(t *testing.T, dialect string) sqltest.Database {
	for _, d := range sqltest.Databases() {
		if d.Dialect == dialect {
			return d
		}
	}
	t.Fatalf("no %s test database", dialect)
	return sqltest.Database{}
}

// walletsIn creates the sqlc schema's wallets table in a fresh namespace of d, with
// wallet 1 at 0 cents, and returns a DSN for it.
func walletsIn(t *testing.T, d sqltest.Database, schemaFile string) (*sql.DB, string) {
	_, dsn := d.Isolated(t)
	db := d.OpenDSN(t, dsn)
	ddl, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	_, err = db.Exec(string(ddl))
	require.NoError(t, err)
	_, err = db.Exec("INSERT INTO wallets (id, cents) VALUES (1, 0)")
	require.NoError(t, err)
	return db, dsn
}

func newInbox(t *testing.T, store inbox.Store) *inbox.Inbox {
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.NoError(t, err)
	return ib
}

func check(t *testing.T, ib *inbox.Inbox, h func(*message.Message) error, cents func() (int64, error)) error {
	return inboxtest.CheckOnce(ib.Middleware, h, message.NewMessage("order-1", nil), func() (any, error) { return cents() })
}

// sqlc on pgx: New(tx) with the pgx.Tx of PostgresStore.
func TestPgx(t *testing.T) {
	t.Parallel()
	d := database(t, sqltest.Postgres)
	_, dsn := walletsIn(t, d, "schema.postgres.sql")
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(context.Background()))
	ib := newInbox(t, store)
	app := pgxdb.New(pool) // the application's queries, on the pool
	cents := func() (int64, error) { return app.Cents(context.Background(), 1) }

	bound := func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
		return pgxdb.New(tx).Credit(msg.Context(), pgxdb.CreditParams{Cents: 190, ID: 1})
	}
	withTx := func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
		return app.WithTx(tx).Credit(msg.Context(), pgxdb.CreditParams{Cents: 190, ID: 1})
	}
	require.NoError(t, check(t, ib, bound, cents))
	require.NoError(t, inboxtest.CheckOnce(ib.Middleware, withTx, message.NewMessage("order-2", nil),
		func() (any, error) { return cents() }))
	got, err := cents()
	require.NoError(t, err)
	require.EqualValues(t, 2*190, got)

	// The trap: the application's queries write outside the inbox transaction.
	trap := func(msg *message.Message) error {
		return app.Credit(msg.Context(), pgxdb.CreditParams{Cents: 190, ID: 1})
	}
	require.ErrorIs(t, inboxtest.CheckOnce(ib.Middleware, trap, message.NewMessage("order-3", nil),
		func() (any, error) { return cents() }), inboxtest.ErrEscaped)
}

// sqlc on database/sql, PostgreSQL: WithTx(tx) with the *sql.Tx of SQLPostgresStore.
func TestDatabaseSQLPostgres(t *testing.T) {
	t.Parallel()
	d := database(t, sqltest.Postgres)
	db, _ := walletsIn(t, d, "schema.postgres.sql")
	store, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(context.Background()))
	ib := newInbox(t, store)
	app := sqlpgdb.New(db)
	cents := func() (int64, error) { return app.Cents(context.Background(), 1) }

	bound := func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
		return app.WithTx(tx).Credit(msg.Context(), sqlpgdb.CreditParams{Cents: 190, ID: 1})
	}
	require.NoError(t, check(t, ib, bound, cents))
	trap := func(msg *message.Message) error {
		return app.Credit(msg.Context(), sqlpgdb.CreditParams{Cents: 190, ID: 1})
	}
	require.ErrorIs(t, inboxtest.CheckOnce(ib.Middleware, trap, message.NewMessage("order-3", nil),
		func() (any, error) { return cents() }), inboxtest.ErrEscaped)
}

// sqlc on database/sql, MySQL and MariaDB: WithTx(tx) with the *sql.Tx of MySQLStore.
func TestDatabaseSQLMySQL(t *testing.T) {
	t.Parallel()
	for _, d := range sqltest.Databases() {
		if d.Dialect != sqltest.MySQL {
			continue
		}
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			db, _ := walletsIn(t, d, "schema.mysql.sql")
			store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{})
			require.NoError(t, err)
			require.NoError(t, store.CreateSchema(context.Background()))
			ib := newInbox(t, store)
			app := mysqldb.New(db)
			cents := func() (int64, error) { return app.Cents(context.Background(), 1) }

			bound := func(msg *message.Message) error {
				tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
				return app.WithTx(tx).Credit(msg.Context(), mysqldb.CreditParams{Cents: 190, ID: 1})
			}
			require.NoError(t, check(t, ib, bound, cents))
			trap := func(msg *message.Message) error {
				return app.Credit(msg.Context(), mysqldb.CreditParams{Cents: 190, ID: 1})
			}
			require.ErrorIs(t, inboxtest.CheckOnce(ib.Middleware, trap, message.NewMessage("order-3", nil),
				func() (any, error) { return cents() }), inboxtest.ErrEscaped)
		})
	}
}
