package benchload

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// The sqlite flavour: sqlitestore on a database file of its own (INBOX_SQLITE_DIR, or
// the temporary directory), through modernc.org/sqlite with sqlitestore.DSN's settings
// (WAL, BEGIN IMMEDIATE, busy_timeout), synchronous FULL by default and NORMAL when
// relaxed. It is removed when closed.

// openSQLite opens a new database file for one run.
func openSQLite(ctx context.Context, relaxed bool) (*sql.DB, func(), error) {
	dir, err := os.MkdirTemp(os.Getenv("INBOX_SQLITE_DIR"), "inbox-bench-")
	if err != nil {
		return nil, nil, err
	}
	dsn := sqlitestore.DSN(filepath.Join(dir, "bench.db")) + "&_pragma=synchronous(FULL)"
	if relaxed {
		dsn = sqlitestore.DSN(filepath.Join(dir, "bench.db")) + "&_pragma=synchronous(NORMAL)"
	}
	db, err := sql.Open("sqlite", dsn)
	if err == nil {
		err = db.PingContext(ctx)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	db.SetMaxOpenConns(20)
	db.SetMaxIdleConns(20)
	return db, func() { _ = db.Close(); _ = os.RemoveAll(dir) }, nil
}

// sqliteStore is the flavour's store on the target's inbox table.
func (t *Target) sqliteStore() (inbox.Store, error) {
	return sqlitestore.New(t.DB, sqlitestore.Config{Table: t.InboxTable})
}

// sqliteAccounts fills the account rows (SQLite has no generate_series).
func (t *Target) sqliteAccounts() string {
	return `WITH RECURSIVE g(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM g WHERE x < ` + strconv.Itoa(Accounts-1) + `) ` +
		`INSERT INTO ` + t.quote(t.accounts) + ` (id, n) SELECT x, 0 FROM g`
}

// HandWritten is the inbox's work written by hand, with no library, as the SQLite
// advice has it: over a handle of one connection (SetMaxOpenConns(1): the pool queues
// the writers of the process), in one transaction (BEGIN IMMEDIATE, from the DSN),
// insert the key unless it is there, and run the handler only if it was not; commit. It
// is the floor the store is measured against: the same statements, without the store's
// code. On pgx, handWrittenPgx.
func (t *Target) HandWritten(ctx context.Context, key string) error {
	if t.Flavour == "pgx" {
		_, _, err := t.handWrittenPgx(ctx, key, nil, nil)
		return err
	}
	db, err := t.oneConn(ctx)
	if err != nil {
		return err
	}
	return t.handWritten(ctx, db, key)
}

// HandWrittenPool is HandWritten over the target's pool of 20 connections, whose
// writers meet at the file's lock and wait in SQLite's busy handler.
func (t *Target) HandWrittenPool(ctx context.Context, key string) error {
	if t.Flavour != "sqlite" {
		return fmt.Errorf("handwritten: sqlite only")
	}
	return t.handWritten(ctx, t.DB, key)
}

func (t *Target) handWritten(ctx context.Context, db *sql.DB, key string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO `+t.quote(t.InboxTable)+` ("consumer", "key", "processed_at", "fingerprint") VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		"handwritten", key, time.Now().UnixMicro(), nil)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 1 {
			err = t.work(ctx, tx, key)
		}
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// oneConn opens, once, a handle of one connection on the target's SQLite file.
func (t *Target) oneConn(ctx context.Context) (*sql.DB, error) {
	t.oneMu.Lock()
	defer t.oneMu.Unlock()
	if t.one != nil {
		return t.one, nil
	}
	if t.Flavour != "sqlite" {
		return nil, fmt.Errorf("handwritten: sqlite only")
	}
	var path string
	if err := t.DB.QueryRowContext(ctx, `SELECT "file" FROM pragma_database_list WHERE "name" = 'main'`).Scan(&path); err != nil {
		return nil, err
	}
	var sync int
	if err := t.DB.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", sqlitestore.DSN(path)+"&_pragma=synchronous("+strconv.Itoa(sync)+")")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	t.one = db
	return db, nil
}
