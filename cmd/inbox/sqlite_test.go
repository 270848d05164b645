package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// openSQLiteTable is a SQLite file of the test's own, named to the binary in the form
// prefix + path.
func openSQLiteTable(prefix string) func(t *testing.T) testDB {
	return func(t *testing.T) testDB {
		t.Helper()
		path := filepath.Join(t.TempDir(), "app.db")
		db, err := sql.Open("sqlite", sqlitestore.DSN(path))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		table := fmt.Sprintf("cli_%08x", time.Now().UnixNano()&0xffffffff)
		store, err := sqlitestore.New(db, sqlitestore.Config{Table: table})
		require.NoError(t, err)
		require.NoError(t, store.CreateSchema(context.Background()))
		quoted := `"` + table + `"`
		return testDB{
			dsn:   prefix + path,
			table: table,
			insert: func(t *testing.T, consumer string, n int, age time.Duration) {
				at := time.Now().Add(-age).UnixMicro()
				for i := 1; i <= n; i++ {
					_, err := db.Exec(`INSERT INTO `+quoted+` ("consumer", "key", "processed_at") VALUES (?, ?, ?)`, consumer, fmt.Sprintf("%s-%d", consumer, i), at)
					require.NoError(t, err)
				}
			},
			count: func(t *testing.T) int {
				var n int
				require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+quoted).Scan(&n))
				return n
			},
		}
	}
}

func TestSQLiteSchemaAndErrors(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("../../schema/sqlite.sql")
	require.NoError(t, err)
	res := inboxCLI(t, "schema", "sqlite")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, string(file), res.stdout)
	renamed, err := inbox.SQLiteSchema("orders_inbox")
	require.NoError(t, err)
	res = inboxCLI(t, "schema", "sqlite3", "--table", "orders_inbox")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, renamed, res.stdout)

	missing := filepath.Join(t.TempDir(), "nosuch.db")
	requireOneLineError(t, inboxCLI(t, "stats", "--dsn", missing), exitFail, "no SQLite database at "+missing)
	_, err = os.Stat(missing)
	require.ErrorIs(t, err, os.ErrNotExist, "the CLI creates no database")

	db := openSQLiteTable("sqlite:")(t)
	requireOneLineError(t, inboxCLI(t, "stats", "--dsn", db.dsn, "--table", "no_such_inbox"), exitFail,
		`"no_such_inbox"`, "inbox schema sqlite")
}
