package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver: pure Go

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// sqlitePath returns the database file a SQLite DSN names: sqlite:PATH,
// sqlite://PATH or sqlite3://PATH (sqlite:///abs/path for an absolute one), or a bare path
// ending in .db, .sqlite or .sqlite3. A file: URI is a modernc.org/sqlite DSN, taken as
// it is: ok is true and path empty.
func sqlitePath(dsn string) (path string, ok bool) {
	for _, prefix := range []string{"sqlite3://", "sqlite://", "sqlite:"} {
		if rest, found := strings.CutPrefix(dsn, prefix); found {
			return rest, true
		}
	}
	if strings.HasPrefix(dsn, "file:") {
		return "", true
	}
	for _, ext := range []string{".db", ".sqlite", ".sqlite3"} {
		if strings.HasSuffix(dsn, ext) && !strings.Contains(dsn, "://") && !isMySQLDSN(dsn) {
			return dsn, true
		}
	}
	return "", false
}

// openSQLite opens the SQLite database a DSN names. A path must name an existing file
// (a typo would otherwise create an empty database); a file: URI is used as it is. The
// store waits up to connectTimeout for the write lock, whatever busy_timeout the DSN
// sets.
func openSQLite(ctx context.Context, dsn, table string) (inbox.Store, func(), error) {
	path, _ := sqlitePath(dsn)
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, nil, fmt.Errorf("no SQLite database at %s: check the path (the CLI creates no database)", path)
			}
			return nil, nil, fmt.Errorf("opening the SQLite database: %w", err)
		}
		dsn = sqlitestore.DSN(path)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the SQLite database: %w", err)
	}
	db.SetMaxOpenConns(2)
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("opening the SQLite database: %w", err)
	}
	store, err := sqlitestore.New(db, sqlitestore.Config{Table: table, LockTimeout: connectTimeout})
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return store, func() { _ = db.Close() }, nil
}
