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

// oldAttemptsSQL tells whether the attempts table $1 (a quoted name) has the layout of
// before migration 000002 (a counter per key), which CreateSchema drops: its rows are
// transient, and dropping them only forgets the crashes of messages yet to come back.
const oldAttemptsSQL = `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'started' AND NOT attisdropped)`

// schemaSteps returns the statements CreateSchema runs after the lock, in order: the
// schema and the search_path of the transaction when there is one, then the DDL.
func schemaSteps(schema, table string) ([]string, error) {
	ddl, err := Schema(table)
	if err != nil || schema == "" {
		return []string{ddl}, err
	}
	s := pgx.Identifier{schema}.Sanitize()
	return []string{"CREATE SCHEMA IF NOT EXISTS " + s, "SET LOCAL search_path TO " + s, ddl}, nil
}

// pgSchemaTx is what CreateSchema needs of its transaction, pgx's or database/sql's.
type pgSchemaTx struct {
	exec     func(query string, args ...any) error
	queryRow func(query string, args ...any) (bool, error)
}

// createSchemaIn runs the DDL of the config's tables in tx, under the creation lock.
func createSchemaIn(tx pgSchemaTx, schema, table string) error {
	steps, err := schemaSteps(schema, table)
	if err != nil {
		return err
	}
	if err := tx.exec(schemaLockSQL, schema); err != nil {
		return fmt.Errorf("taking the schema creation lock (pg_advisory_xact_lock): %w", err)
	}
	// The old attempts table is dropped under the lock, after the schema exists.
	for _, q := range steps[:len(steps)-1] {
		if err := tx.exec(q); err != nil {
			return err
		}
	}
	attempts := pgName(schema, table+"_attempts")
	old, err := tx.queryRow(oldAttemptsSQL, attempts)
	if err != nil {
		return fmt.Errorf("reading the attempts table's columns: %w", err)
	}
	if old {
		if err := tx.exec("DROP TABLE " + attempts); err != nil {
			return fmt.Errorf("dropping the attempts table of before migration 000002: %w", err)
		}
	}
	return tx.exec(steps[len(steps)-1])
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
// schema/postgres.sql, for users who do not run a migration tool. Any number of
// processes may call it at once (see the notes above schemaLockSQL).
func (s *SQLStore) CreateSchema(ctx context.Context) error {
	if _, err := Schema(s.cfg.Table); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("inbox: creating the schema: beginning: %w", err)
	}
	err = createSchemaIn(pgSchemaTx{
		exec: func(q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		},
		queryRow: func(q string, args ...any) (b bool, err error) {
			err = tx.QueryRowContext(ctx, q, args...).Scan(&b)
			return b, err
		},
	}, s.cfg.Schema, s.cfg.Table)
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return errors.Join(fmt.Errorf("inbox: creating the schema: %w", err), ignoreDone(tx.Rollback()))
	}
	return nil
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
	return nil
}

// CreateSchema creates the store's tables and index if they do not exist, with the DDL of
// schema/postgres.sql, for users who do not run a migration tool. Any number of
// processes may call it at once (see the notes above schemaLockSQL).
func (s *Store) CreateSchema(ctx context.Context) error {
	if _, err := Schema(s.cfg.Table); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("inbox: creating the schema: beginning: %w", err)
	}
	err = createSchemaIn(pgSchemaTx{
		exec: func(q string, args ...any) error {
			_, err := tx.Exec(ctx, q, args...)
			return err
		},
		queryRow: func(q string, args ...any) (b bool, err error) {
			err = tx.QueryRow(ctx, q, args...).Scan(&b)
			return b, err
		},
	}, s.cfg.Schema, s.cfg.Table)
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("inbox: creating the schema: %w", err), ignoreDone(tx.Rollback(context.WithoutCancel(ctx))))
	}
	return nil
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
	return nil
}
