package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/schema"
)

// CreateSchema creates the store's tables and index if they do not exist, with the DDL
// of schema/sqlite.sql, in one transaction, for users who do not run a migration tool,
// and upgrades tables of an older version with the steps they lack
// (schema.SQLiteSteps), as `inbox migrate up` does. Its transaction begins with BEGIN
// IMMEDIATE: creators in other processes wait for the write lock (busy_timeout), then
// find the tables.
// It leaves the journal mode as it is: DSN asks for WAL.
func (s *Store) CreateSchema(ctx context.Context) error {
	_, _, err := s.MigrateSchema(ctx)
	return err
}

// MigrateSchema is CreateSchema, and returns the tables' version before (0: there
// were none), read under the write lock, and after: `inbox migrate up`.
//
// Processes that open a new database file together can meet SQLITE_BUSY without the
// busy handler being called (WAL's first reader while another process sets the journal
// mode up): the transaction is then tried again, for up to DefaultBusyTimeout.
func (s *Store) MigrateSchema(ctx context.Context) (before, after int, err error) {
	deadline := time.Now().Add(DefaultBusyTimeout * time.Millisecond)
	for try := 1; ; try++ {
		before, after, err = s.migrateSchema(ctx)
		if err == nil || !errors.Is(err, contract.ErrContended) || time.Now().After(deadline) {
			return before, after, err
		}
		select {
		case <-ctx.Done():
			return before, after, err
		case <-time.After(min(time.Duration(try)*10*time.Millisecond, 200*time.Millisecond)):
		}
	}
}

// migrateSchema is one try of MigrateSchema.
func (s *Store) migrateSchema(ctx context.Context) (before, after int, err error) {
	ddl, err := Schema(s.cfg.Table)
	if err != nil {
		return 0, 0, err
	}
	const doing = "creating the schema"
	l, err := s.enter(ctx, doing)
	if err != nil {
		return 0, 0, err
	}
	defer l.release()
	// BEGIN IMMEDIATE takes the write lock before the version is read: a deferred
	// transaction that read before another process's creation committed would fail at
	// its first write (SQLITE_BUSY, without waiting). SQLite's DDL is transactional.
	if _, err := l.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, 0, joinErrors(s.wrap(doing, err), l.restore(ctx, l.conn))
	}
	before, err = s.upgradeIn(ctx, l.conn, ddl)
	if err == nil {
		_, err = l.conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		_, rollbackErr := l.conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return 0, 0, joinErrors(s.wrap(doing, err), rollbackErr, l.restore(ctx, l.conn))
	}
	return before, max(before, schema.SQLiteSteps.Version()), l.restore(ctx, l.conn)
}

// upgradeIn brings the tables to the code's version through db, in a transaction that
// holds the write lock: the whole DDL (ddl) for a fresh database, else the steps the
// tables lack.
func (s *Store) upgradeIn(ctx context.Context, db sqlstore.DB, ddl string) (before int, err error) {
	v, err := s.readVersion(ctx, db)
	if err != nil {
		return 0, err
	}
	if v.Have > 0 {
		ddl = ""
		seq := schema.SQLiteSteps
		for n := v.Have + 1; n <= seq.Version(); n++ {
			ddl += sqlstore.WithTable(seq.Step(n).Up, `"`, s.cfg.Table) + "\n"
		}
	}
	if ddl == "" {
		return v.Have, nil
	}
	_, err = db.ExecContext(ctx, ddl)
	return v.Have, err
}

// readVersion reads the version of the tables (see sqlstore.Version) through db.
func (s *Store) readVersion(ctx context.Context, db queryer) (sqlstore.Version, error) {
	t := s.cfg.Table
	rows, err := db.QueryContext(ctx, `SELECT "name" FROM sqlite_master WHERE "type" = 'table' AND "name" IN (?, ?, ?, ?)`, t, t+"_attempts", t+"_offsets", t+"_schema")
	if err != nil {
		return sqlstore.Version{}, fmt.Errorf("reading the tables' version: %w", err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			_ = rows.Close()
			return sqlstore.Version{}, fmt.Errorf("reading the tables' version: %w", err)
		}
		have[name] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return sqlstore.Version{}, fmt.Errorf("reading the tables' version: %w", err)
	}
	if have[t+"_schema"] && have[t] { // a version row left beside dropped tables is not a version
		rows, err := db.QueryContext(ctx, `SELECT "version", "compatible" FROM "`+t+`_schema" ORDER BY "version" DESC LIMIT 1`)
		if err != nil {
			return sqlstore.Version{}, fmt.Errorf("reading the tables' version: %w", err)
		}
		v := sqlstore.Version{Recorded: true}
		found := rows.Next()
		if found {
			err = rows.Scan(&v.Have, &v.Compatible)
		}
		if err := errors.Join(err, rows.Err(), rows.Close()); err != nil {
			return sqlstore.Version{}, fmt.Errorf("reading the tables' version: %w", err)
		}
		if found {
			return v, nil
		}
	}
	return sqlstore.Recognised(schema.SQLiteSteps, have[t], have[t+"_attempts"], false, have[t+"_offsets"]), nil
}

// SchemaVersion returns the version of the store's tables (0 when they do not exist;
// for tables made before versions were recorded, the version their columns match) and
// the version this code needs. CreateSchema, or `inbox migrate up`, upgrades them.
func (s *Store) SchemaVersion(ctx context.Context) (have, want int, err error) {
	v, err := s.readVersion(ctx, s.db)
	if err != nil {
		return 0, 0, s.wrap("reading the schema version", err)
	}
	return v.Have, schema.SQLiteSteps.Version(), nil
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
	v, err := s.readVersion(ctx, s.db)
	if err == nil {
		err = sqlstore.CheckVersion(schema.SQLiteSteps, v, s.cfg.Table, sqlstore.UpgradeCommand(s.cfg.Table, ""))
	}
	if err != nil {
		return fmt.Errorf("inbox: checking the tables: %w", err)
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
