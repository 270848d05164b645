package postgresstore

import (
	"context"
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

// postgresDDL returns the DDL that creates the tables in schema (created if missing),
// or where the search_path puts them when schema is empty. With a schema it is one
// transaction whose search_path is that schema, so the index lands beside its table.
func postgresDDL(schema, table string) (string, error) {
	ddl, err := Schema(table)
	if err != nil || schema == "" {
		return ddl, err
	}
	s := pgx.Identifier{schema}.Sanitize()
	return "BEGIN;\nCREATE SCHEMA IF NOT EXISTS " + s + ";\nSET LOCAL search_path TO " + s + ";\n" + ddl + "\nCOMMIT;\n", nil
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
// schema/postgres.sql, for users who do not run a migration tool.
func (s *SQLStore) CreateSchema(ctx context.Context) error {
	ddl, err := postgresDDL(s.cfg.Schema, s.cfg.Table)
	if err != nil {
		return err
	}
	if err := sqlstore.DropOldAttempts(pgName(s.cfg.Schema, s.cfg.Table+"_attempts"), func(q string) error {
		_, err := s.db.ExecContext(ctx, q)
		return err
	}); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("inbox: creating the schema: %w", err)
	}
	return nil
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
// schema/postgres.sql, for users who do not run a migration tool.
func (s *Store) CreateSchema(ctx context.Context) error {
	ddl, err := postgresDDL(s.cfg.Schema, s.cfg.Table)
	if err != nil {
		return err
	}
	if err := sqlstore.DropOldAttempts(pgName(s.cfg.Schema, s.cfg.Table+"_attempts"), func(q string) error {
		_, err := s.db.Exec(ctx, q)
		return err
	}); err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("inbox: creating the schema: %w", err)
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
