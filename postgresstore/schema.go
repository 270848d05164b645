package postgresstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/schema"
)

// A schema for the PostgreSQL stores' tables (PostgresConfig.Schema,
// SQLPostgresConfig.Schema): every statement names the tables with it, and the
// transactions the store begins can put it first in their search_path (SearchPath), so
// that a handler's unqualified table names resolve there: a schema per tenant on one
// server, behind a TenantStore. See ADR 91.

// maxSchemaLen is PostgreSQL's identifier limit.
const maxSchemaLen = 63

// validateSchema checks a schema name: empty (the search_path finds the tables), or a
// plain identifier, so that it can be quoted safely into SQL.
func validateSchema(schema string, searchPath bool) error {
	switch {
	case schema == "" && searchPath:
		return fmt.Errorf("SearchPath is set without Schema: name the schema to put first in the search_path")
	case schema == "":
		return nil
	case !sqlstore.IdentifierRE.MatchString(schema) || len(schema) > maxSchemaLen:
		return fmt.Errorf("Schema %q is not a valid schema name: use letters, digits and underscores, not starting with a digit, at most %d bytes", schema, maxSchemaLen)
	}
	return nil
}

// pgName returns the quoted name of a table, in schema when there is one.
func pgName(schema, table string) string {
	if schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

// searchPathSQL is the statement that puts schema first in the search_path of the
// current transaction (set_config's is_local: the session's own is back when the
// transaction ends), before the session's own path.
func searchPathSQL(schema string) string {
	s := pgx.Identifier{schema}.Sanitize() // a checked identifier: no quote to escape
	return `SELECT set_config('search_path', CASE WHEN current_setting('search_path') IN ('', '""') THEN '` + s +
		`' ELSE '` + s + `, ' || current_setting('search_path') END, true)`
}

// Creating the tables is safe for any number of replicas starting together (ADR 133):
// CreateSchema runs in one READ COMMITTED transaction that first takes a transaction
// advisory lock (pg_advisory_xact_lock) keyed by the schema the tables go in, then runs
// the DDL. A second creator waits on the lock until the first commits, and its
// CREATE … IF NOT EXISTS then finds the tables: no duplicate in pg_type, no "already
// exists". A transaction lock, unlike a session one, is released by the commit, so it
// works behind a pooler in transaction mode (PgBouncer) and is never left behind on a
// pooled connection. The key is the schema's, not the table's, so that two tables
// created together in a new schema do not race on CREATE SCHEMA either.

// schemaLockSQL takes the creation lock: $1 is the config's schema, or "" for the
// session's current schema (where the search_path puts the tables).
const schemaLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('inbox.schema.' || COALESCE(NULLIF($1::text, ''), current_schema(), ''), 0))`

// schemaSteps returns the statements CreateSchema runs after the lock, in order: the
// schema and the search_path of the transaction when there is one, then the DDL.
func schemaSteps(pgSchema, table string) ([]string, error) {
	ddl, err := Schema(table)
	if err != nil || pgSchema == "" {
		return []string{ddl}, err
	}
	s := pgx.Identifier{pgSchema}.Sanitize()
	return []string{"CREATE SCHEMA IF NOT EXISTS " + s, "SET LOCAL search_path TO " + s, ddl}, nil
}

// pgTablesSQL tells which of the tables $1 (<table>_schema), $2 (the inbox table), $3
// (attempts) and $4 (offsets), quoted names, exist, and whether $3 has the layout of
// before version 2 (a counter per key).
const pgTablesSQL = `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL, to_regclass($3) IS NOT NULL, to_regclass($4) IS NOT NULL,
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($3) AND attname = 'started' AND NOT attisdropped)`

// pgSchemaTx is what CreateSchema and the version's read need of a transaction or a
// handle, pgx's or database/sql's.
type pgSchemaTx struct {
	exec     func(query string, args ...any) error
	queryRow func(query string, args ...any) pgx.Row // Scan, as *sql.Row has it
}

// pgVersion reads the version of the tables (see sqlstore.Version).
func pgVersion(tx pgSchemaTx, pgSchema, table string) (sqlstore.Version, error) {
	versions := pgName(pgSchema, table+"_schema")
	var recorded, inbox, attempts, offsets, oldAttempts bool
	if err := tx.queryRow(pgTablesSQL, versions, pgName(pgSchema, table), pgName(pgSchema, table+"_attempts"), pgName(pgSchema, table+"_offsets")).
		Scan(&recorded, &inbox, &attempts, &offsets, &oldAttempts); err != nil {
		return sqlstore.Version{}, fmt.Errorf("reading the tables' version: %w", err)
	}
	if recorded && inbox { // a version row left beside dropped tables is not a version
		v := sqlstore.Version{Recorded: true}
		err := tx.queryRow(`SELECT version, compatible FROM `+versions+` ORDER BY version DESC LIMIT 1`).Scan(&v.Have, &v.Compatible)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, sql.ErrNoRows) {
			return sqlstore.Version{}, fmt.Errorf("reading the tables' version: %w", err)
		}
	}
	return sqlstore.Recognised(schema.PostgresSteps, inbox, attempts, oldAttempts, offsets), nil
}

// createSchemaIn brings the config's tables to the code's version in tx, under the
// creation lock: the whole DDL for a fresh database, else the steps the tables lack
// (version 2 drops the attempts table of version 1: its rows are transient, and
// dropping them only forgets the crashes of messages yet to come back).
func createSchemaIn(tx pgSchemaTx, pgSchema, table string) (before int, err error) {
	steps, err := schemaSteps(pgSchema, table)
	if err != nil {
		return 0, err
	}
	if err := tx.exec(schemaLockSQL, pgSchema); err != nil {
		return 0, fmt.Errorf("taking the schema creation lock (pg_advisory_xact_lock): %w", err)
	}
	for _, q := range steps[:len(steps)-1] { // the schema, the search_path
		if err := tx.exec(q); err != nil {
			return 0, err
		}
	}
	v, err := pgVersion(tx, pgSchema, table)
	if err != nil {
		return 0, err
	}
	if v.Have == 0 {
		return 0, tx.exec(steps[len(steps)-1])
	}
	seq := schema.PostgresSteps
	for n := v.Have + 1; n <= seq.Version(); n++ {
		if err := tx.exec(sqlstore.WithTable(seq.Step(n).Up, `"`, table)); err != nil {
			return v.Have, fmt.Errorf("applying version %d (%s): %w", n, seq.Step(n).Name, err)
		}
	}
	return v.Have, nil
}

// Schema returns the PostgreSQL DDL (schema/postgres.sql) for an inbox table
// named table.
func Schema(table string) (string, error) {
	if err := sqlstore.ValidateTable(table); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return sqlstore.WithTable(schema.Postgres, `"`, table), nil
}

// CreateSchema creates the store's tables and index if they do not exist, with the DDL of
// schema/postgres.sql, for users who do not run a migration tool, and upgrades tables of
// an older version with the steps they lack (schema.PostgresSteps), as `inbox migrate
// up` does. Any number of processes may call it at once (see the notes above
// schemaLockSQL).
func (s *SQLStore) CreateSchema(ctx context.Context) error {
	_, _, err := s.MigrateSchema(ctx)
	return err
}

// MigrateSchema is CreateSchema, and returns the tables' version before (0: there
// were none), read under the lock, and after: `inbox migrate up`.
func (s *SQLStore) MigrateSchema(ctx context.Context) (before, after int, err error) {
	if _, err := Schema(s.cfg.Table); err != nil {
		return 0, 0, err
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, 0, fmt.Errorf("inbox: creating the schema: beginning: %w", err)
	}
	before, err = createSchemaIn(pgSchemaTx{
		exec: func(q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		},
		queryRow: func(q string, args ...any) pgx.Row { return tx.QueryRowContext(ctx, q, args...) },
	}, s.cfg.Schema, s.cfg.Table)
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return 0, 0, errors.Join(fmt.Errorf("inbox: creating the schema: %w", err), ignoreDone(tx.Rollback()))
	}
	return before, max(before, schema.PostgresSteps.Version()), nil
}

// ignoreDone drops the error of a rollback after a commit or a failed commit.
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) || errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

// Verify implements Store, for the inbox (not for you). It also fails, with
// ErrStatementCache, when the driver uses pgx's statement cache through a pooler in
// transaction mode (PgBouncer), where it cannot work.
func (s *SQLStore) Verify(ctx context.Context) error {
	cached, err := sqlStatementCache(ctx, s.db)
	if err == nil {
		err = s.pooler.statementCache(ctx, cached)
	}
	if err != nil {
		return err
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.sql.verify).Scan(&n); err != nil {
		return s.wrap("checking the tables", err)
	}
	return checkPgVersion(s.versionReader(ctx), s.cfg.Schema, s.cfg.Table)
}

func (s *SQLStore) versionReader(ctx context.Context) pgSchemaTx {
	return pgSchemaTx{queryRow: func(q string, args ...any) pgx.Row { return s.db.QueryRowContext(ctx, q, args...) }}
}

// SchemaVersion returns the version of the store's tables (0 when they do not exist;
// for tables made before versions were recorded, the version their columns match) and
// the version this code needs. CreateSchema, or `inbox migrate up`, upgrades them.
func (s *SQLStore) SchemaVersion(ctx context.Context) (have, want int, err error) {
	v, err := pgVersion(s.versionReader(ctx), s.cfg.Schema, s.cfg.Table)
	if err != nil {
		return 0, 0, fmt.Errorf("inbox: %w", err)
	}
	return v.Have, schema.PostgresSteps.Version(), nil
}

// checkPgVersion refuses tables whose version this code does not run on.
func checkPgVersion(r pgSchemaTx, pgSchema, table string) error {
	v, err := pgVersion(r, pgSchema, table)
	if err == nil {
		err = sqlstore.CheckVersion(schema.PostgresSteps, v, pgName(pgSchema, table), sqlstore.UpgradeCommand(table, pgSchema))
	}
	if err != nil {
		return fmt.Errorf("inbox: checking the tables: %w", err)
	}
	return nil
}

// CreateSchema creates the store's tables and index if they do not exist, with the DDL of
// schema/postgres.sql, for users who do not run a migration tool, and upgrades tables of
// an older version with the steps they lack (schema.PostgresSteps), as `inbox migrate
// up` does. Any number of processes may call it at once (see the notes above
// schemaLockSQL).
func (s *Store) CreateSchema(ctx context.Context) error {
	_, _, err := s.MigrateSchema(ctx)
	return err
}

// MigrateSchema is CreateSchema, and returns the tables' version before (0: there
// were none), read under the lock, and after: `inbox migrate up`.
func (s *Store) MigrateSchema(ctx context.Context) (before, after int, err error) {
	if _, err := Schema(s.cfg.Table); err != nil {
		return 0, 0, err
	}
	tx, err := s.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, 0, fmt.Errorf("inbox: creating the schema: beginning: %w", err)
	}
	before, err = createSchemaIn(pgSchemaTx{
		exec: func(q string, args ...any) error {
			_, err := tx.Exec(ctx, q, args...)
			return err
		},
		queryRow: func(q string, args ...any) pgx.Row { return tx.QueryRow(ctx, q, args...) },
	}, s.cfg.Schema, s.cfg.Table)
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return 0, 0, errors.Join(fmt.Errorf("inbox: creating the schema: %w", err), ignoreDone(tx.Rollback(context.WithoutCancel(ctx))))
	}
	return before, max(before, schema.PostgresSteps.Version()), nil
}

// Verify implements Store, for the inbox (not for you). It also fails, with
// ErrStatementCache, when db uses pgx's statement cache through a pooler in transaction
// mode (PgBouncer), where it cannot work.
func (s *Store) Verify(ctx context.Context) error {
	if err := s.pooler.statementCache(ctx, pgxStatementCache(s.db)); err != nil {
		return err
	}
	var n int
	if err := s.db.QueryRow(ctx, s.sql.verify).Scan(&n); err != nil {
		return s.wrap("checking the tables", err)
	}
	return checkPgVersion(s.versionReader(ctx), s.cfg.Schema, s.cfg.Table)
}

func (s *Store) versionReader(ctx context.Context) pgSchemaTx {
	return pgSchemaTx{queryRow: func(q string, args ...any) pgx.Row { return s.db.QueryRow(ctx, q, args...) }}
}

// SchemaVersion returns the version of the store's tables (0 when they do not exist;
// for tables made before versions were recorded, the version their columns match) and
// the version this code needs. CreateSchema, or `inbox migrate up`, upgrades them.
func (s *Store) SchemaVersion(ctx context.Context) (have, want int, err error) {
	v, err := pgVersion(s.versionReader(ctx), s.cfg.Schema, s.cfg.Table)
	if err != nil {
		return 0, 0, fmt.Errorf("inbox: %w", err)
	}
	return v.Have, schema.PostgresSteps.Version(), nil
}
