package mysqlstore

import (
	"fmt"

	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/schema"
)

// Schema returns the MySQL and MariaDB DDL (schema/mysql.sql) for an inbox table
// named table. It holds several statements: run them one by one, or with a connection
// that allows multiStatements.
func Schema(table string) (string, error) {
	if err := sqlstore.ValidateTable(table); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return sqlstore.WithTable(schema.MySQL, "`", table), nil
}
