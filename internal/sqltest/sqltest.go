// Package sqltest holds what the tests of the database/sql integrations (the nested ORM
// modules, the migrations, watermill-sql v3) share: the test databases, fresh inbox
// tables on them, and a wallet table for handlers to credit. It imports only the root
// package, database/sql and the two drivers the root already requires, so a nested
// module's tests build nothing more for it. Outside CI a database that cannot be reached
// skips the test, naming the variable to set; under CI (CI=true) it fails it.
package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/watermill-inbox/inbox"
)

// Dialects.
const (
	Postgres = "postgres"
	MySQL    = "mysql"
)

// Database is one test database.
type Database struct {
	Name     string // "postgres", "mariadb", "mysql"
	Dialect  string // Postgres or MySQL
	Driver   string // the database/sql driver: "pgx" or "mysql"
	DSN      string
	Variable string // the environment variable that sets DSN
}

// Databases returns PostgreSQL and MariaDB, and MySQL when INBOX_MYSQL_DSN is set.
func Databases() []Database {
	dbs := []Database{
		{Name: "postgres", Dialect: Postgres, Driver: "pgx", DSN: env("INBOX_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), Variable: "INBOX_POSTGRES_DSN"},
		{Name: "mariadb", Dialect: MySQL, Driver: "mysql", DSN: env("INBOX_MARIADB_DSN", "root@tcp(127.0.0.1:3306)/test"), Variable: "INBOX_MARIADB_DSN"},
	}
	if dsn := os.Getenv("INBOX_MYSQL_DSN"); dsn != "" {
		dbs = append(dbs, Database{Name: "mysql", Dialect: MySQL, Driver: "mysql", DSN: dsn, Variable: "INBOX_MYSQL_DSN"})
	}
	return dbs
}

func env(variable, def string) string {
	if v := os.Getenv(variable); v != "" {
		return v
	}
	return def
}

// Unavailable fails the test under CI and skips it elsewhere.
func Unavailable(t testing.TB, what, variable string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable (set %s): %v", what, variable, err)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Name returns a fresh name for a table or schema of one test.
func Name(prefix string) string {
	return fmt.Sprintf("%s_%d_%08x", prefix, time.Now().UnixNano()%1e6, rand.Uint32())
}

// Open opens d, pings it and closes it when the test ends.
func (d Database) Open(t testing.TB) *sql.DB {
	t.Helper()
	return d.OpenDSN(t, d.DSN)
}

// OpenDSN is Open with another DSN of the same server.
func (d Database) OpenDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.Driver, dsn)
	if err != nil {
		t.Fatalf("%s: %v", d.Variable, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		Unavailable(t, d.Name, d.Variable, err)
	}
	return db
}

// Quote quotes an identifier in d's dialect.
func (d Database) Quote(name string) string {
	if d.Dialect == MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// SQL rewrites the ? placeholders of query into $1, $2... on PostgreSQL.
func (d Database) SQL(query string) string {
	if d.Dialect == MySQL {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Store returns the database/sql store of d's dialect on fresh tables, dropped when the
// test ends, and the table's name.
func (d Database) Store(t testing.TB, db *sql.DB) (inbox.Store, string) {
	t.Helper()
	table := Name("inbox")
	var store interface {
		inbox.Store
		CreateSchema(context.Context) error
	}
	var err error
	if d.Dialect == MySQL {
		store, err = inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table})
	} else {
		store, err = inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Table: table})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.DropAtCleanup(t, db, table, table+"_attempts", table+"_offsets")
	return store, table
}

// Inbox returns an inbox of the consumer "billing" on a fresh store of d's dialect (see
// Store): what a test of a binding to the inbox's transaction starts from.
func (d Database) Inbox(t testing.TB, db *sql.DB) *inbox.Inbox {
	t.Helper()
	store, _ := d.Store(t, db)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// DropAtCleanup drops tables when the test ends.
func (d Database) DropAtCleanup(t testing.TB, db *sql.DB, tables ...string) {
	t.Cleanup(func() {
		for _, table := range tables {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+d.Quote(table))
		}
	})
}

// Wallet creates a table of one wallet row (id 1, cents 0), dropped when the test ends,
// and returns its name.
func (d Database) Wallet(t testing.TB, db *sql.DB) string {
	t.Helper()
	table := Name("wallet")
	for _, stmt := range []string{
		"CREATE TABLE " + d.Quote(table) + " (id bigint PRIMARY KEY, cents bigint NOT NULL)",
		"INSERT INTO " + d.Quote(table) + " (id, cents) VALUES (1, 0)",
	} {
		if _, err := db.ExecContext(context.Background(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	d.DropAtCleanup(t, db, table)
	return table
}

// Cents reads the wallet's balance.
func (d Database) Cents(t testing.TB, db *sql.DB, wallet string) int64 {
	t.Helper()
	var cents int64
	if err := db.QueryRowContext(context.Background(), "SELECT cents FROM "+d.Quote(wallet)+" WHERE id = 1").Scan(&cents); err != nil {
		t.Fatal(err)
	}
	return cents
}
