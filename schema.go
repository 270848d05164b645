package inbox

import (
	"fmt"

	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/schema"
)

// SQLiteSchema returns the SQLite DDL (schema/sqlite.sql) for an inbox table named
// table, for the store in package sqlitestore. It holds several statements, which
// database/sql's SQLite drivers run in one Exec.
func SQLiteSchema(table string) (string, error) {
	if err := sqlstore.ValidateTable(table); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return sqlstore.WithTable(schema.SQLite, `"`, table), nil
}
