// Package entdriver binds ent to the inbox transaction: Driver returns an ent driver
// whose statements run in the *sql.Tx that the message context carries, for a client of
// your generated package:
//
//	drv, err := entdriver.Driver(msg.Context(), dialect.Postgres)
//	client := ent.NewClient(ent.Driver(drv)) // ent: your generated package
//	err = client.Wallet.UpdateOneID(1).AddCents(190).Exec(msg.Context())
//
// The obvious one-liner, entsql.NewDriver(dialect, entsql.Conn{ExecQuerier: tx}), runs
// queries but panics on the first update or delete: ent's graph operations begin a
// transaction through the driver, and entsql.Driver begins it on a *sql.DB it assumes.
// Driver answers those with ent's own no-op transaction (dialect.NopTx), as ent's
// generated txDriver does inside an ent.Tx. For the same reason client.Tx on such a
// client returns a transaction whose Commit and Rollback do nothing: to roll back,
// return an error from the handler.
//
// With the sql/execquery feature (entc gen.FeatureExecQuery), client.ExecContext and
// client.QueryContext run raw SQL in the inbox transaction too.
//
// It is 30 lines; copy it into your project rather than importing an example module.
package entdriver

import (
	"context"
	"database/sql"
	"errors"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/watermill-inbox/inbox"
)

// ErrNoTx is returned by Driver when the context carries no inbox *sql.Tx.
var ErrNoTx = errors.New("entdriver: no inbox *sql.Tx in the context: call Driver with the message context, behind a database/sql store (inbox.NewSQLPostgresStore, inbox.NewMySQLStore)")

// Driver returns an ent driver of the given dialect (dialect.Postgres, dialect.MySQL)
// on the inbox transaction that ctx carries.
func Driver(ctx context.Context, dialectName string) (dialect.Driver, error) {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok {
		return nil, ErrNoTx
	}
	return txDriver{entsql.NewDriver(dialectName, entsql.Conn{ExecQuerier: tx})}, nil
}

// txDriver is an entsql.Driver on a transaction someone else ends.
type txDriver struct{ *entsql.Driver }

// Tx returns a transaction whose Commit and Rollback do nothing: the inbox ends it.
func (d txDriver) Tx(context.Context) (dialect.Tx, error) { return dialect.NopTx(d), nil }

// BeginTx is Tx; ent calls it with options the joined transaction already has.
func (d txDriver) BeginTx(ctx context.Context, _ *sql.TxOptions) (dialect.Tx, error) {
	return d.Tx(ctx)
}

// Close does nothing: the transaction is the inbox's, its *sql.DB the application's.
func (d txDriver) Close() error { return nil }
