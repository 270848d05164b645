package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox"
)

// A missing table is most often a --table that names another one (the default is
// "inbox", an application's table may be "billing_inbox"): the error says which tables
// of the database look like what was asked for.

// tableHint adds to err, when it wraps inbox.ErrNoTable, what --table could name: the
// tables of the database that have a <name><suffix> table ("_attempts" beside an inbox
// table, "_offsets" for offset mode). Any other error, or one of a database that cannot
// be asked, is returned as it is.
func tableHint(ctx context.Context, dsn, schema, table, suffix string, err error) error {
	if !errors.Is(err, inbox.ErrNoTable) {
		return err
	}
	names, listErr := tablesEndingIn(ctx, dsn, schema, suffix)
	if listErr != nil {
		return err
	}
	return fmt.Errorf("%w; %s", err, tablesHint(table, suffix, names))
}

// tablesHint says what --table could name, from names, the tables ending in suffix
// (without it).
func tablesHint(table, suffix string, names []string) string {
	if len(names) == 0 {
		return fmt.Sprintf("--table is %q, and no <table>%s is here: check --dsn (and --schema)", table, suffix)
	}
	const most = 10
	list := strings.Join(names[:min(len(names), most)], ", ")
	if len(names) > most {
		list += fmt.Sprintf(" and %d more", len(names)-most)
	}
	return fmt.Sprintf("wrong --table? It is %q; the tables here with a <table>%s are %s (pass one as --table)", table, suffix, list)
}

// tablesEndingIn lists the tables of the database dsn names (in schema, or the current
// one, on PostgreSQL) whose name ends in suffix, without it, on a connection of its own.
func tablesEndingIn(ctx context.Context, dsn, schema, suffix string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return nil, err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		rows, err := conn.Query(ctx, `SELECT left(table_name, length(table_name) - length($2)) FROM information_schema.tables
			WHERE table_schema = coalesce(nullif($1, ''), current_schema()) AND right(table_name, length($2)) = $2 ORDER BY 1`, schema, suffix)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	case strings.HasPrefix(dsn, "mysql://"), isMySQLDSN(dsn):
		db, err := sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
		if err != nil {
			return nil, err
		}
		defer db.Close()
		return queryNames(ctx, db, "SELECT LEFT(table_name, CHAR_LENGTH(table_name) - CHAR_LENGTH(?)) FROM information_schema.tables"+
			" WHERE table_schema = DATABASE() AND RIGHT(table_name, CHAR_LENGTH(?)) = ? ORDER BY 1", suffix, suffix, suffix)
	}
	if path, ok := sqlitePath(dsn); ok && path != "" {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			return nil, err
		}
		defer db.Close()
		return queryNames(ctx, db, `SELECT substr(name, 1, length(name) - length(?)) FROM sqlite_master WHERE type = 'table' AND substr(name, -length(?)) = ? ORDER BY 1`,
			suffix, suffix, suffix)
	}
	return nil, errors.ErrUnsupported
}

// queryNames runs query and returns its first column.
func queryNames(ctx context.Context, db *sql.DB, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	return names, rows.Err()
}
