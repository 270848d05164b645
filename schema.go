package inbox

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
)

// The DDL files in schema/ are the single source of truth: users run them as they are
// (for the default table name), and the stores and tests create tables from them.
var (
	//go:embed schema/postgres.sql
	postgresSchema string

	//go:embed schema/mysql.sql
	mysqlSchema string

	//go:embed schema/sqlite.sql
	sqliteSchema string
)

// DefaultTable is the inbox table's default name. A store also uses the table
// <name>_attempts, for Config.MaxAttempts.
const DefaultTable = "inbox"

// maxTableLen leaves room for the "_attempts" and "_processed_at" suffixes within
// PostgreSQL's 63-byte identifiers.
const maxTableLen = 48

var identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateTable checks a table name: a plain identifier, so that it can be quoted
// safely into SQL.
func validateTable(table string) error {
	if !identifierRE.MatchString(table) || len(table) > maxTableLen {
		return fmt.Errorf("Table %q is not a valid table name: use letters, digits and underscores, not starting with a digit, at most %d bytes", table, maxTableLen)
	}
	return nil
}

// withTable renames the default table in a schema file whose identifiers are all quoted
// with quote and start with the default name: "inbox", "inbox_attempts"...
func withTable(schema, quote, table string) string {
	return strings.ReplaceAll(schema, quote+DefaultTable, quote+table)
}

// PostgresSchema returns the PostgreSQL DDL (schema/postgres.sql) for an inbox table
// named table.
func PostgresSchema(table string) (string, error) {
	if err := validateTable(table); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return withTable(postgresSchema, `"`, table), nil
}

// MySQLSchema returns the MySQL and MariaDB DDL (schema/mysql.sql) for an inbox table
// named table. It holds several statements: run them one by one, or with a connection
// that allows multiStatements.
func MySQLSchema(table string) (string, error) {
	if err := validateTable(table); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return withTable(mysqlSchema, "`", table), nil
}

// SQLiteSchema returns the SQLite DDL (schema/sqlite.sql) for an inbox table named
// table, for the store in package sqlitestore. It holds several statements, which
// database/sql's SQLite drivers run in one Exec.
func SQLiteSchema(table string) (string, error) {
	if err := validateTable(table); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return withTable(sqliteSchema, `"`, table), nil
}

// sqlStatements splits a schema file of ours into its statements, each ended by ";" at
// the end of a line, and drops the parts that hold only comments.
func sqlStatements(ddl string) []string {
	var stmts []string
	for _, part := range strings.Split(ddl, ";\n") {
		for _, line := range strings.Split(part, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
				stmts = append(stmts, strings.TrimSpace(part))
				break
			}
		}
	}
	return stmts
}

// dropOldAttempts drops the attempts table attempts (quoted) when it has the layout of
// before migration 000002 (a counter per key), so that CreateSchema makes the new one:
// its rows are transient, and dropping them only forgets the crashes of messages that
// are yet to come back. exec runs a statement; a table that is missing or already new
// fails the probe and is left alone.
func dropOldAttempts(attempts string, exec func(query string) error) error {
	if exec(`SELECT started FROM `+attempts+` WHERE 1 = 0`) != nil {
		return nil
	}
	if err := exec(`DROP TABLE ` + attempts); err != nil {
		return fmt.Errorf("inbox: dropping the attempts table of before migration 000002: %w", err)
	}
	return nil
}
