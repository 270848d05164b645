package sqltest

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// Isolated creates an empty namespace of d for one test — a schema on PostgreSQL, a
// database on MySQL — dropped with everything in it when the test ends, and returns its
// name and a DSN whose unqualified tables live in it.
func (d Database) Isolated(t testing.TB) (name, dsn string) {
	t.Helper()
	admin := d.Open(t)
	name = Name("iso")
	create, drop := "CREATE SCHEMA "+d.Quote(name), "DROP SCHEMA IF EXISTS "+d.Quote(name)+" CASCADE"
	if d.Dialect == MySQL {
		create, drop = "CREATE DATABASE "+d.Quote(name), "DROP DATABASE IF EXISTS "+d.Quote(name)
	}
	if _, err := admin.ExecContext(context.Background(), create); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), drop) })

	if d.Dialect == MySQL {
		cfg, err := mysql.ParseDSN(d.DSN)
		if err != nil {
			t.Fatalf("%s: %v", d.Variable, err)
		}
		cfg.DBName = name
		return name, cfg.FormatDSN()
	}
	if u, err := url.Parse(d.DSN); err == nil && strings.HasPrefix(u.Scheme, "postgres") {
		q := u.Query()
		q.Set("search_path", name)
		u.RawQuery = q.Encode()
		return name, u.String()
	}
	return name, d.DSN + " search_path=" + name // keyword/value form
}

// IsolatedDatabase is Isolated with a database of its own on PostgreSQL too (its schema
// is "public"), for tools that read the whole catalog: a catalog query of PostgreSQL can
// fail while another test of the same database drops a table ("could not open relation
// with OID"). On MySQL it is Isolated.
func (d Database) IsolatedDatabase(t testing.TB) (schema, dsn string) {
	t.Helper()
	if d.Dialect == MySQL {
		return d.Isolated(t)
	}
	u, err := url.Parse(d.DSN)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		t.Skipf("%s is not a postgres:// URL: IsolatedDatabase needs one", d.Variable)
	}
	admin := d.Open(t)
	name := Name("isodb")
	if _, err := admin.ExecContext(context.Background(), "CREATE DATABASE "+d.Quote(name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+d.Quote(name)+" WITH (FORCE)")
	})
	u.Path = "/" + name
	return "public", u.String()
}
