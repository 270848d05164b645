package sqlx_test

import (
	"database/sql"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

type wallet struct {
	ID    int64 `db:"id"`
	Cents int64 `db:"cents"`
}

type credit struct {
	ID    int64 `db:"id"`
	Cents int64 `db:"cents"`
}

func TestSQLX(t *testing.T) {
	t.Parallel()
	for _, d := range sqltest.Databases() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			db := d.Open(t)
			store, _ := d.Store(t, db)
			table := d.Wallet(t, db)
			ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
			require.NoError(t, err)
			dbx := sqlx.NewDb(db, d.Driver) // the application's handle
			balance := func() (any, error) {
				var w wallet
				err := dbx.Get(&w, dbx.Rebind("SELECT id, cents FROM "+d.Quote(table)+" WHERE id = ?"), 1)
				return w.Cents, err
			}
			named := "UPDATE " + d.Quote(table) + " SET cents = cents + :cents WHERE id = :id"

			// The binding: a *sqlx.Tx around the inbox's *sql.Tx; named queries compiled
			// by the *sqlx.DB.
			bound := func(msg *message.Message) error {
				sqlTx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
				tx := &sqlx.Tx{Tx: sqlTx, Mapper: dbx.Mapper}
				var w wallet
				if err := tx.GetContext(msg.Context(), &w, dbx.Rebind("SELECT id, cents FROM "+d.Quote(table)+" WHERE id = ?"), 1); err != nil {
					return err
				}
				query, args, err := dbx.BindNamed(named, credit{ID: w.ID, Cents: 190})
				if err != nil {
					return err
				}
				_, err = tx.ExecContext(msg.Context(), query, args...)
				return err
			}
			require.NoError(t, inboxtest.CheckOnce(ib.Middleware, bound, message.NewMessage("order-1", nil), balance))

			// The pitfall: the wrapped Tx has no driver name, so its own named queries
			// use ? placeholders: fine on MySQL, a syntax error on PostgreSQL.
			namedOnTx := func(msg *message.Message) error {
				sqlTx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
				tx := &sqlx.Tx{Tx: sqlTx, Mapper: dbx.Mapper}
				_, err := tx.NamedExecContext(msg.Context(), named, credit{ID: 1, Cents: 190})
				return err
			}
			res := inboxtest.Deliver(ib.Middleware(inboxtest.HandlerFunc(namedOnTx)), message.NewMessage("order-2", nil))
			if d.Dialect == sqltest.Postgres {
				require.Error(t, res.Err, "named query with ? placeholders on PostgreSQL")
			} else {
				require.NoError(t, res.Err)
			}

			// The trap: the application's handle writes outside the inbox transaction.
			trap := func(msg *message.Message) error {
				_, err := dbx.NamedExecContext(msg.Context(), named, credit{ID: 1, Cents: 190})
				return err
			}
			require.ErrorIs(t, inboxtest.CheckOnce(ib.Middleware, trap, message.NewMessage("order-3", nil), balance), inboxtest.ErrEscaped)
		})
	}
}
