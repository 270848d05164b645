package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3" // "sqlite3": cgo
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // "sqlite": pure Go

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// The tests run on real SQLite files in t.TempDir(), through both tested drivers, and
// in processes of their own where several processes share a file.

// driver is a database/sql SQLite driver and the DSN of a file with the store's settings.
type driver struct {
	name string
	dsn  func(path string) string
}

var drivers = []driver{
	{name: "sqlite", dsn: sqlitestore.DSN},
	{name: "sqlite3", dsn: func(path string) string {
		return "file:" + path + "?_busy_timeout=5000&_journal_mode=WAL&_txlock=immediate"
	}},
}

// open opens dsn with the driver, closed when the test ends.
func open(t testing.TB, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(context.Background()))
	return db
}

// tempPath is a database file in the test's temporary directory.
func tempPath(t testing.TB) string { return filepath.Join(t.TempDir(), "inbox.db") }

// newStore returns a store on db with its tables created.
func newStore(t testing.TB, db inbox.SQLDB, cfg sqlitestore.Config) *sqlitestore.Store {
	t.Helper()
	store, err := sqlitestore.New(db, cfg)
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(context.Background()))
	return store
}

// ledger is a table of credits that handlers write through the inbox's *sql.Tx.
type ledger struct{ db *sql.DB }

func newLedger(t testing.TB, db *sql.DB) ledger {
	t.Helper()
	_, err := db.Exec(`CREATE TABLE IF NOT EXISTS ledger (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)`)
	require.NoError(t, err)
	return ledger{db: db}
}

func (l ledger) credit(ctx context.Context, amount int) error {
	tx, err := inbox.RequireTx[*sql.Tx](ctx)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO ledger (amount) VALUES (?)`, amount)
	return err
}

func (l ledger) balance(t testing.TB) (total, credits int) {
	t.Helper()
	require.NoError(t, l.db.QueryRow(`SELECT coalesce(sum(amount), 0), count(*) FROM ledger`).Scan(&total, &credits))
	return total, credits
}
