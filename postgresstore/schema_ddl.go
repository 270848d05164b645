package postgresstore

import (
	"fmt"

	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/schema"
)

// Schema returns the PostgreSQL DDL (schema/postgres.sql) for an inbox table
// named table.
func Schema(table string) (string, error) {
	if err := sqlstore.ValidateTable(table); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return sqlstore.WithTable(schema.Postgres, `"`, table), nil
}
