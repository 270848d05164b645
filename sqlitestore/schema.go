package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/schema"
)

// CreateSchema creates the store's tables and index if they do not exist, with the DDL
// of schema/sqlite.sql, in one transaction, for users who do not run a migration tool.
// It leaves the journal mode as it is: DSN asks for WAL.
func (s *Store) CreateSchema(ctx context.Context) error {
	ddl, err := Schema(s.cfg.Table)
	if err != nil {
		return err
	}
	return s.write(ctx, "creating the schema", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, ddl)
		return err
	})
}

// The columns the store reads and writes, per table.
var (
	inboxColumns    = []string{"consumer", "key", "processed_at", "fingerprint", "output"}
	attemptsColumns = []string{"consumer", "key", "attempt", "started_at"}
)

// Verify implements inbox.Store. It checks that the tables exist with the columns the
// store needs (an error wrapping inbox.ErrNoTable otherwise), and, for an in-memory
// database behind a pool, that the pool's connections share one database.
func (s *Store) Verify(ctx context.Context) error {
	info, err := s.info(ctx)
	if err != nil {
		return err
	}
	if err := s.checkTables(ctx, s.db); err != nil {
		return err
	}
	if pool, ok := s.db.(*sql.DB); ok && info.path == "" && pool.Stats().MaxOpenConnections != 1 {
		return s.checkSharedMemory(ctx, pool)
	}
	return nil
}

// checkTables checks the columns of both tables on db.
func (s *Store) checkTables(ctx context.Context, db sqlstore.DB) error {
	for _, t := range []struct {
		name string
		want []string
	}{{s.cfg.Table, inboxColumns}, {s.cfg.Table + "_attempts", attemptsColumns}} {
		have, err := s.columns(ctx, db, t.name)
		if err != nil {
			return err
		}
		var missing []string
		for _, c := range t.want {
			if !slices.Contains(have, c) {
				missing = append(missing, c)
			}
		}
		switch {
		case len(have) == 0:
			return fmt.Errorf("inbox: checking the tables: %w: table %q does not exist: run schema/sqlite.sql, `inbox schema sqlite`, or (*sqlitestore.Store).CreateSchema", contract.ErrNoTable, t.name)
		case len(missing) > 0:
			return fmt.Errorf("inbox: checking the tables: %w: table %q lacks the columns %s: it is outdated; apply the migrations in migrations/sqlite", contract.ErrNoTable, t.name, strings.Join(missing, ", "))
		}
	}
	return nil
}

// queryer is what a *sql.DB, *sql.Conn and *sql.Tx share for a query.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// columns returns the names of table's columns, none when it does not exist.
func (s *Store) columns(ctx context.Context, db queryer, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, s.sql.tableInfo, table)
	if err != nil {
		return nil, s.wrap("checking the tables", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, s.wrap("checking the tables", err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("checking the tables", err)
	}
	return names, nil
}

// checkSharedMemory checks that two connections of the pool see the same in-memory
// database: ":memory:" gives each connection a database of its own, empty, in which
// the tables the first one created do not exist.
func (s *Store) checkSharedMemory(ctx context.Context, pool *sql.DB) error {
	first, err := pool.Conn(ctx)
	if err != nil {
		return s.wrap("acquiring a connection", err)
	}
	defer first.Close()
	second, err := pool.Conn(ctx)
	if err != nil {
		return s.wrap("acquiring a second connection", err)
	}
	defer second.Close()
	for _, c := range []*sql.Conn{first, second} {
		if err := s.checkTables(ctx, c); err != nil {
			return fmt.Errorf("inbox: the SQLite database is in memory, and the pool's connections do not share it (each connection to :memory: has a database of its own): "+
				"call db.SetMaxOpenConns(1) (then the store serves one message at a time), or use a file (t.TempDir() in tests): %w", err)
		}
	}
	return nil
}

// Schema returns the SQLite DDL (schema/sqlite.sql) for an inbox table named table. It
// holds several statements, which database/sql's SQLite drivers run in one Exec.
func Schema(table string) (string, error) {
	if err := sqlstore.ValidateTable(table); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return sqlstore.WithTable(schema.SQLite, `"`, table), nil
}
