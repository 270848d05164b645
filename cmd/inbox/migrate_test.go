package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of database/sql
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/schema"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// The previous release's tables under this build (ADR 135): a table at version 3 (SQLite
// 2), made by hand with the steps of that release and holding keys and attempts, is
// refused by inbox.New with the upgrade command; inbox migrate up upgrades it, from any
// number of runners at once, and nothing is lost.

// oldTable is a table at the previous release's version on one database.
type oldTable struct {
	dsn, table string
	db         *sql.DB
	seq        schema.Sequence
	quote      string // the identifier quote
	newStore   func(t *testing.T) inbox.Store
}

const (
	oldKeys     = 120
	oldAttempts = 3
)

func openOldTable(t *testing.T, name string) oldTable {
	table := fmt.Sprintf("cli_old_%08x", rand.Uint32())
	var o oldTable
	switch name {
	case "postgres":
		db, err := sql.Open("pgx", postgresDSN())
		require.NoError(t, err)
		if err := db.Ping(); err != nil {
			unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
		}
		o = oldTable{dsn: postgresDSN(), db: db, seq: schema.PostgresSteps, quote: `"`}
		o.newStore = func(t *testing.T) inbox.Store {
			s, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Table: table})
			require.NoError(t, err)
			return s
		}
	case "mariadb":
		db, err := sql.Open("mysql", mariaDBDSN())
		require.NoError(t, err)
		if err := db.Ping(); err != nil {
			unavailable(t, "MariaDB", "INBOX_MARIADB_DSN", err)
		}
		o = oldTable{dsn: mariaDBDSN(), db: db, seq: schema.MySQLSteps, quote: "`"}
		o.newStore = func(t *testing.T) inbox.Store {
			s, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table})
			require.NoError(t, err)
			return s
		}
	case "sqlite":
		path := filepath.Join(t.TempDir(), "app.db")
		db, err := sql.Open("sqlite", sqlitestore.DSN(path))
		require.NoError(t, err)
		o = oldTable{dsn: "sqlite:" + path, db: db, seq: schema.SQLiteSteps, quote: `"`}
		o.newStore = func(t *testing.T) inbox.Store {
			s, err := sqlitestore.New(db, sqlitestore.Config{Table: table})
			require.NoError(t, err)
			return s
		}
	}
	o.table = table
	t.Cleanup(func() {
		for _, suffix := range []string{"", "_attempts", "_offsets", "_schema"} {
			_, _ = o.db.Exec("DROP TABLE IF EXISTS " + o.q(table+suffix))
		}
		_ = o.db.Close()
	})
	// The previous release: every step but the last, as its CreateSchema or a migration
	// tool left them.
	for n := 1; n < o.seq.Version(); n++ {
		for _, stmt := range sqlstore.Statements(sqlstore.WithTable(o.seq.Step(n).Up, o.quote, table)) {
			_, err := o.db.Exec(stmt)
			require.NoError(t, err, "version %d", n)
		}
	}
	for i := range oldKeys {
		_, err := o.db.Exec(o.rebind("INSERT INTO "+o.q(table)+" ("+o.q("consumer")+", "+o.q("key")+", "+o.q("processed_at")+") VALUES ('billing', ?, ?)"),
			fmt.Sprint("order-", i), o.now())
		require.NoError(t, err)
	}
	for i := range oldAttempts {
		_, err := o.db.Exec(o.rebind("INSERT INTO "+o.q(table+"_attempts")+" ("+o.q("consumer")+", "+o.q("key")+", "+o.q("attempt")+", "+o.q("started_at")+") VALUES ('billing', 'order-x', ?, ?)"),
			fmt.Sprint("token-", i), o.now())
		require.NoError(t, err)
	}
	return o
}

// rebind writes PostgreSQL's $1, $2... for the ? of query.
func (o oldTable) rebind(query string) string {
	if o.seq.Dialect != "postgres" {
		return query
	}
	for n := 1; strings.Contains(query, "?"); n++ {
		query = strings.Replace(query, "?", fmt.Sprint("$", n), 1)
	}
	return query
}

// q quotes an identifier.
func (o oldTable) q(name string) string { return o.quote + name + o.quote }

// now is a processed_at or started_at value of the dialect.
func (o oldTable) now() any {
	if o.seq.Dialect == "sqlite" {
		return 1_700_000_000_000_000 // microseconds
	}
	return "2026-01-02 03:04:05"
}

func (o oldTable) count(t *testing.T, suffix string) int {
	var n int
	require.NoError(t, o.db.QueryRow("SELECT COUNT(*) FROM "+o.q(o.table+suffix)).Scan(&n))
	return n
}

func TestMigrateUpgradesThePreviousRelease(t *testing.T) {
	for _, name := range []string{"postgres", "mariadb", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			o := openOldTable(t, name)
			old := o.seq.Version() - 1

			// New refuses the old table, naming the command.
			_, err := inbox.New(inbox.Config{Store: o.newStore(t), Consumer: "billing"})
			require.ErrorIs(t, err, inbox.ErrNoTable)
			require.Contains(t, err.Error(), fmt.Sprintf("schema version %d", old))
			require.Contains(t, err.Error(), "inbox migrate up --dsn <your DSN> --table "+o.table)

			res := inboxCLI(t, "migrate", "status", "--dsn", o.dsn, "--table", o.table)
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, fmt.Sprintf("version %d (this build: %d), behind", old, o.seq.Version()))

			// Runners started together (a deploy's every replica): all succeed.
			const runners = 4
			results := make([]result, runners)
			var wg sync.WaitGroup
			for i := range runners {
				wg.Add(1)
				go func() { defer wg.Done(); results[i] = inboxCLI(t, "migrate", "up", "--dsn", o.dsn, "--table", o.table) }()
			}
			wg.Wait()
			upgraded := 0
			for _, res := range results {
				require.Equal(t, 0, res.code, res.stderr)
				if strings.Contains(res.stdout, fmt.Sprintf("version %d -> %d", old, o.seq.Version())) {
					upgraded++
				}
			}
			require.Equal(t, 1, upgraded, "one runner upgrades, the others find it done: %+v", results)

			// Nothing lost: the keys, the attempts; the keys are still duplicates.
			require.Equal(t, oldKeys, o.count(t, ""))
			require.Equal(t, oldAttempts, o.count(t, "_attempts"))
			ib, err := inbox.New(inbox.Config{Store: o.newStore(t), Consumer: "billing"})
			require.NoError(t, err)
			dup, err := ib.Process(ctx, "billing", "order-7", func(context.Context) error { return nil })
			require.NoError(t, err)
			require.True(t, dup, "a key of the old table is a duplicate after the upgrade")
			res = inboxCLI(t, "migrate", "status", "--dsn", o.dsn, "--table", o.table, "--json")
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, fmt.Sprintf(`"before":%d,"after":%d,"code":%d,"state":"current"`, o.seq.Version(), o.seq.Version(), o.seq.Version()))
			t.Logf("%s: %d keys and %d attempts at version %d; New refused; %d concurrent migrate up: 1 upgraded, %d found it done; %d keys and %d attempts after",
				name, oldKeys, oldAttempts, old, runners, runners-1, o.count(t, ""), o.count(t, "_attempts"))
		})
	}
}

// Tables dropped without their version table (an operator's DROP of the three tables
// the docs named before versions) are created again, not taken as current.
func TestMigrateAfterTablesDroppedWithoutTheirVersion(t *testing.T) {
	for _, name := range []string{"postgres", "mariadb", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := openOldTable(t, name)
			res := inboxCLI(t, "migrate", "up", "--dsn", o.dsn, "--table", o.table)
			require.Equal(t, 0, res.code, res.stderr)
			for _, suffix := range []string{"", "_attempts", "_offsets"} {
				_, err := o.db.Exec("DROP TABLE " + o.q(o.table+suffix))
				require.NoError(t, err)
			}
			res = inboxCLI(t, "migrate", "status", "--dsn", o.dsn, "--table", o.table)
			require.Contains(t, res.stdout, "missing")
			res = inboxCLI(t, "migrate", "up", "--dsn", o.dsn, "--table", o.table)
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, fmt.Sprintf("version 0 -> %d", o.seq.Version()))
			_, err := inbox.New(inbox.Config{Store: o.newStore(t), Consumer: "billing"})
			require.NoError(t, err)
		})
	}
}

// Tables a newer build migrated: accepted when the newer version's row says this build
// still runs on them (compatible), refused otherwise, naming the version they need.
func TestNewerTables(t *testing.T) {
	for _, name := range []string{"postgres", "mariadb", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := openOldTable(t, name)
			res := inboxCLI(t, "migrate", "up", "--dsn", o.dsn, "--table", o.table)
			require.Equal(t, 0, res.code, res.stderr)
			code := o.seq.Version()
			insert := func(version, compatible int) {
				_, err := o.db.Exec(o.rebind("INSERT INTO "+o.q(o.table+"_schema")+" ("+o.q("version")+", "+o.q("name")+", "+o.q("compatible")+") VALUES (?, ?, ?)"),
					version, fmt.Sprint("future_", version), compatible)
				require.NoError(t, err)
			}
			insert(code+1, code) // only added: this build runs on it
			_, err := inbox.New(inbox.Config{Store: o.newStore(t), Consumer: "billing"})
			require.NoError(t, err, "a compatible newer version is accepted")
			res = inboxCLI(t, "migrate", "status", "--dsn", o.dsn, "--table", o.table)
			require.Contains(t, res.stdout, fmt.Sprintf("version %d (this build: %d), ahead", code+1, code))

			insert(code+2, code+2) // changed what older code reads or writes
			_, err = inbox.New(inbox.Config{Store: o.newStore(t), Consumer: "billing"})
			require.ErrorIs(t, err, inbox.ErrNoTable)
			require.Contains(t, err.Error(), fmt.Sprintf("schema version %d, which needs code of version %d or later, and this code is at %d", code+2, code+2, code))
		})
	}
}
