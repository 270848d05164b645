package migratetest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// catalog is what the database's own catalog says about the tables of one schema (the
// migration tools' bookkeeping tables left out), one line per fact, so that two
// catalogs compare with require.Equal and a difference reads as the line that differs.
type catalog struct {
	Tables  []string // name, engine and collation on MySQL
	Columns []string // table, position, name, type, nullability, default, collation
	Indexes []string // table, index, uniqueness, columns in order
}

// toolTables are the tools' bookkeeping tables.
var toolTables = "'schema_migrations', 'goose_db_version'"

func readCatalog(t *testing.T, d sqltest.Database, db *sql.DB, schema string) catalog {
	t.Helper()
	var c catalog
	if d.Dialect == sqltest.MySQL {
		c.Tables = lines(t, db, `SELECT CONCAT_WS(' | ', TABLE_NAME, ENGINE, TABLE_COLLATION) FROM information_schema.TABLES
			WHERE TABLE_SCHEMA = ? AND TABLE_NAME NOT IN (`+toolTables+`) ORDER BY TABLE_NAME`, schema)
		c.Columns = lines(t, db, `SELECT CONCAT_WS(' | ', TABLE_NAME, ORDINAL_POSITION, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE,
				COALESCE(COLUMN_DEFAULT, 'no default'), COALESCE(COLLATION_NAME, 'no collation'), EXTRA)
			FROM information_schema.COLUMNS
			WHERE TABLE_SCHEMA = ? AND TABLE_NAME NOT IN (`+toolTables+`) ORDER BY TABLE_NAME, ORDINAL_POSITION`, schema)
		c.Indexes = lines(t, db, `SELECT CONCAT_WS(' | ', TABLE_NAME, INDEX_NAME, NON_UNIQUE,
				GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ', '))
			FROM information_schema.STATISTICS
			WHERE TABLE_SCHEMA = ? AND TABLE_NAME NOT IN (`+toolTables+`)
			GROUP BY TABLE_NAME, INDEX_NAME, NON_UNIQUE ORDER BY TABLE_NAME, INDEX_NAME`, schema)
		return c
	}
	c.Tables = lines(t, db, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = $1 AND table_name NOT IN (`+toolTables+`) ORDER BY table_name`, schema)
	c.Columns = lines(t, db, `SELECT concat_ws(' | ', table_name, ordinal_position, column_name, data_type, is_nullable,
			coalesce(column_default, 'no default'), coalesce(collation_name, 'no collation'))
		FROM information_schema.columns
		WHERE table_schema = $1 AND table_name NOT IN (`+toolTables+`) ORDER BY table_name, ordinal_position`, schema)
	// pg_indexes.indexdef names the schema ("ON iso_x.inbox"): drop it, the rest is the
	// index as the server understands it (method, columns, uniqueness).
	c.Indexes = lines(t, db, `SELECT concat_ws(' | ', tablename, indexname, replace(indexdef, ' ' || quote_ident(schemaname) || '.', ' '))
		FROM pg_indexes WHERE schemaname = $1 AND tablename NOT IN (`+toolTables+`) ORDER BY tablename, indexname`, schema)
	pk := lines(t, db, `SELECT concat_ws(' | ', tc.table_name, tc.constraint_type, tc.constraint_name)
		FROM information_schema.table_constraints tc
		WHERE tc.table_schema = $1 AND tc.table_name NOT IN (`+toolTables+`) AND tc.constraint_type IN ('PRIMARY KEY', 'UNIQUE', 'FOREIGN KEY')
		ORDER BY 1`, schema)
	c.Indexes = append(c.Indexes, pk...)
	return c
}

func lines(t *testing.T, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s sql.NullString
		require.NoError(t, rows.Scan(&s))
		out = append(out, strings.Join(strings.Fields(fmt.Sprint(s.String)), " "))
	}
	require.NoError(t, rows.Err())
	return out
}
