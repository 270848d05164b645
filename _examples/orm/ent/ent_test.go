package ent_test

import (
	"context"
	"database/sql"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/_examples/orm/ent"
	"github.com/watermill-inbox/inbox/_examples/orm/ent/wallet"
	"github.com/watermill-inbox/inbox/_examples/orm/entdriver"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// inboxClient returns an ent client whose every statement runs in the inbox transaction
// that ctx carries.
func inboxClient(ctx context.Context, entDialect string) (*ent.Client, error) {
	drv, err := entdriver.Driver(ctx, entDialect)
	if err != nil {
		return nil, err
	}
	return ent.NewClient(ent.Driver(drv)), nil
}

func TestEnt(t *testing.T) {
	t.Parallel()
	for _, d := range sqltest.Databases() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			entDialect := dialect.Postgres
			if d.Dialect == sqltest.MySQL {
				entDialect = dialect.MySQL
			}
			ctx := context.Background()
			_, dsn := d.Isolated(t) // ent's table is "wallets": one namespace per test
			db := d.OpenDSN(t, dsn)
			app := ent.NewClient(ent.Driver(entsql.OpenDB(entDialect, db))) // the application's client
			require.NoError(t, app.Schema.Create(ctx))
			require.NoError(t, app.Wallet.Create().SetID(1).SetCents(0).Exec(ctx))
			store, _ := d.Store(t, db)
			ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
			require.NoError(t, err)
			balance := func() (any, error) {
				w, err := app.Wallet.Get(ctx, 1)
				if err != nil {
					return nil, err
				}
				return w.Cents, nil
			}

			bound := func(msg *message.Message) error {
				client, err := inboxClient(msg.Context(), entDialect)
				if err != nil {
					return err
				}
				return client.Wallet.UpdateOneID(1).AddCents(190).Exec(msg.Context())
			}
			require.NoError(t, inboxtest.CheckOnce(ib.Middleware, bound, message.NewMessage("order-1", nil), balance))

			// sql/execquery: raw statements on the bound client run in the transaction too.
			raw := func(msg *message.Message) error {
				client, err := inboxClient(msg.Context(), entDialect)
				if err != nil {
					return err
				}
				_, err = client.ExecContext(msg.Context(), d.SQL("UPDATE wallets SET cents = cents + ? WHERE id = ?"), 190, 1)
				return err
			}
			require.NoError(t, inboxtest.CheckOnce(ib.Middleware, raw, message.NewMessage("order-2", nil), balance))
			n, err := app.Wallet.Query().Where(wallet.Cents(2 * 190)).Count(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)

			// The trap: the application's client, or a transaction begun on it.
			trap := func(msg *message.Message) error {
				tx, err := app.Tx(msg.Context())
				if err != nil {
					return err
				}
				if err := tx.Wallet.UpdateOneID(1).AddCents(190).Exec(msg.Context()); err != nil {
					return tx.Rollback()
				}
				return tx.Commit()
			}
			require.ErrorIs(t, inboxtest.CheckOnce(ib.Middleware, trap, message.NewMessage("order-3", nil), balance), inboxtest.ErrEscaped)

			// The obvious one-liner panics on the first update: ent begins a transaction
			// through the driver, and entsql.Driver assumes a *sql.DB.
			oneLiner := func(msg *message.Message) error {
				tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
				client := ent.NewClient(ent.Driver(entsql.NewDriver(entDialect, entsql.Conn{ExecQuerier: tx})))
				require.Panics(t, func() { _ = client.Wallet.UpdateOneID(1).AddCents(190).Exec(msg.Context()) })
				return nil
			}
			require.NoError(t, inboxtest.Deliver(ib.Middleware(inboxtest.HandlerFunc(oneLiner)), message.NewMessage("order-4", nil)).Err)

			_, err = entdriver.Driver(ctx, entDialect)
			require.ErrorIs(t, err, entdriver.ErrNoTx)
		})
	}
}
