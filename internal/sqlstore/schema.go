package sqlstore

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// maxTableLen leaves room for the "_attempts" and "_processed_at" suffixes within
// PostgreSQL's 63-byte identifiers.
const MaxTableLen = 48

var IdentifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidateTable checks a table name: a plain identifier, so that it can be quoted
// safely into SQL.
func ValidateTable(table string) error {
	if !IdentifierRE.MatchString(table) || len(table) > MaxTableLen {
		return fmt.Errorf("Table %q is not a valid table name: use letters, digits and underscores, not starting with a digit, at most %d bytes", table, MaxTableLen)
	}
	return nil
}

// WithTable renames the default table in a schema file whose identifiers are all quoted
// with quote and start with the default name: "inbox", "inbox_attempts"...
func WithTable(schema, quote, table string) string {
	return strings.ReplaceAll(schema, quote+contract.DefaultTable, quote+table)
}

// Statements splits a schema file of ours into its statements, each ended by ";" at
// the end of a line, and drops the parts that hold only comments.
func Statements(ddl string) []string {
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

// DropOldAttempts drops the attempts table attempts (quoted) when it has the layout of
// before migration 000002 (a counter per key), so that CreateSchema makes the new one:
// its rows are transient, and dropping them only forgets the crashes of messages that
// are yet to come back. exec runs a statement; a table that is missing or already new
// fails the probe and is left alone.
func DropOldAttempts(attempts string, exec func(query string) error) error {
	if exec(`SELECT started FROM `+attempts+` WHERE 1 = 0`) != nil {
		return nil
	}
	if err := exec(`DROP TABLE ` + attempts); err != nil {
		return fmt.Errorf("inbox: dropping the attempts table of before migration 000002: %w", err)
	}
	return nil
}
