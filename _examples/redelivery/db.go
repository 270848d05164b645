package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	_ "github.com/go-sql-driver/mysql" // "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	_ "modernc.org/sqlite"             // "sqlite": pure Go, no cgo

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/exampleenv"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// database is the example's database: the inbox store on it, and the handle the example
// reads the wallet through.
type database struct {
	db       *sql.DB
	store    inbox.Store
	postgres bool
	close    func()
}

// openDatabase opens the database -db names, with the inbox tables and the example's
// own, empty.
func openDatabase(ctx context.Context, which string) (*database, error) {
	d := &database{}
	var err error
	switch which {
	case "sqlite": // a file of its own, removed at the end: nothing to start, nothing to reach
		var dir string
		if dir, err = os.MkdirTemp("", "inbox-example-"); err != nil {
			return nil, err
		}
		if d.db, err = sql.Open("sqlite", sqlitestore.DSN(filepath.Join(dir, "example.db"))); err != nil {
			return nil, err
		}
		d.close = func() { _ = d.db.Close(); _ = os.RemoveAll(dir) }
		d.store, err = sqlitestore.New(d.db, sqlitestore.Config{Table: "example_inbox"})
	case "postgres":
		if d.db, err = sql.Open("pgx", exampleenv.PostgresDSN()); err != nil {
			return nil, err
		}
		d.postgres, d.close = true, func() { _ = d.db.Close() }
		d.store, err = inbox.NewSQLPostgresStore(d.db, inbox.SQLPostgresConfig{Table: "example_inbox"})
	case "mysql":
		if d.db, err = sql.Open("mysql", exampleenv.MariaDBDSN()); err != nil {
			return nil, err
		}
		d.close = func() { _ = d.db.Close() }
		d.store, err = inbox.NewMySQLStore(d.db, inbox.MySQLConfig{Table: "example_inbox"})
	default:
		return nil, fmt.Errorf("-db %q: use sqlite, postgres or mysql", which)
	}
	if err == nil {
		err = d.reset(ctx)
	}
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// reset creates the inbox tables and the example's, empty.
func (d *database) reset(ctx context.Context) error {
	for _, table := range []string{"example_inbox", "example_inbox_attempts", "example_inbox_offsets", "example_wallets", "example_receipts"} {
		if _, err := d.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+table); err != nil {
			return err
		}
	}
	if err := d.store.(interface{ CreateSchema(context.Context) error }).CreateSchema(ctx); err != nil {
		return err
	}
	for _, stmt := range []string{
		`CREATE TABLE example_wallets (id VARCHAR(64) PRIMARY KEY, cents BIGINT NOT NULL)`,
		`INSERT INTO example_wallets VALUES ('alice', 0)`,
		`CREATE TABLE example_receipts (order_uuid VARCHAR(64) NOT NULL)`,
	} {
		if _, err := d.db.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// q writes a statement's ? placeholders as $1, $2... for PostgreSQL.
func (d *database) q(query string) string {
	if !d.postgres {
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

func (d *database) walletCents(ctx context.Context) (int64, error) {
	var c int64
	err := d.db.QueryRowContext(ctx, `SELECT cents FROM example_wallets WHERE id = 'alice'`).Scan(&c)
	return c, err
}
