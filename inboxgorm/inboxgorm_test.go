package inboxgorm_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxgorm"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// world is one database with an inbox, a wallet table and the application's GORM handle.
type world struct {
	d      sqltest.Database
	db     *sql.DB
	gdb    *gorm.DB // the application-wide handle
	ib     *inbox.Inbox
	wallet string
}

func newWorld(t *testing.T, d sqltest.Database) *world {
	t.Helper()
	w := &world{d: d, db: d.Open(t)}
	w.ib, w.wallet = d.Inbox(t, w.db), d.Wallet(t, w.db)
	var err error
	w.gdb, err = gorm.Open(dialector(d, w.db), &gorm.Config{Logger: logger.Discard})
	require.NoError(t, err)
	return w
}

// dialector is GORM's driver for d on an existing connection pool or transaction.
func dialector(d sqltest.Database, conn gorm.ConnPool) gorm.Dialector {
	if d.Dialect == sqltest.MySQL {
		return mysql.New(mysql.Config{Conn: conn, SkipInitializeWithVersion: true})
	}
	return postgres.New(postgres.Config{Conn: conn})
}

// credit adds 190 cents through g.
func (w *world) credit(g *gorm.DB) error {
	return g.Table(w.wallet).Where("id = ?", 1).Update("cents", gorm.Expr("cents + ?", 190)).Error
}

func (w *world) cents(t *testing.T) int64 { return w.d.Cents(t, w.db, w.wallet) }

// bindings are the correct ways to write through the inbox transaction with GORM.
func (w *world) bindings() map[string]func(*message.Message) error {
	return map[string]func(*message.Message) error{
		"inboxgorm.DB": func(msg *message.Message) error {
			g, err := inboxgorm.DB(msg.Context(), w.gdb)
			if err != nil {
				return err
			}
			return w.credit(g)
		},
		"gorm.Open per message": func(msg *message.Message) error {
			tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
			g, err := gorm.Open(dialector(w.d, tx), &gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard})
			if err != nil {
				return err
			}
			return w.credit(g.WithContext(msg.Context()))
		},
	}
}

// trap begins a transaction on the application's handle: it escapes the inbox.
func (w *world) trap(msg *message.Message) error {
	return w.gdb.WithContext(msg.Context()).Transaction(func(tx *gorm.DB) error { return w.credit(tx) })
}

func TestGORM(t *testing.T) {
	t.Parallel()
	for _, d := range sqltest.Databases() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			for name := range newWorld(t, d).bindings() {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					w := newWorld(t, d)
					h := w.bindings()[name]
					require.NoError(t, inboxtest.CheckOnce(w.ib.Middleware, h, message.NewMessage("order-1", nil),
						func() (any, error) { return w.cents(t), nil }))
					require.EqualValues(t, 190, w.cents(t))
				})
			}

			t.Run("a Transaction on the bound handle is a savepoint", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, d)
				errInner := errors.New("inner step failed")
				h := func(msg *message.Message) error {
					g, err := inboxgorm.DB(msg.Context(), w.gdb)
					if err != nil {
						return err
					}
					if err := w.credit(g); err != nil {
						return err
					}
					err = g.Transaction(func(tx *gorm.DB) error {
						if err := w.credit(tx); err != nil {
							return err
						}
						return errInner // rolls back to the savepoint: the second credit only
					})
					if !errors.Is(err, errInner) {
						return err
					}
					return nil
				}
				failed := inboxtest.Deliver(w.ib.Middleware(inboxtest.FailAfter(1, h)), message.NewMessage("order-2", nil))
				require.ErrorIs(t, failed.Err, inboxtest.ErrInjected)
				require.Zero(t, w.cents(t), "the savepoint and what it kept rolled back with the inbox")
				res := inboxtest.Deliver(w.ib.Middleware(inboxtest.HandlerFunc(h)), message.NewMessage("order-2", nil))
				require.NoError(t, res.Err)
				require.EqualValues(t, 190, w.cents(t), "the outer credit committed, the savepoint's rolled back")
			})

			t.Run("the trap: a transaction on the app-wide handle", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, d)
				// The handler runs, then the inbox rolls back (here an injected failure; in
				// production a later error, a crash before the commit), and the message
				// comes again.
				failThenRedeliver := func(h func(*message.Message) error) {
					msg := message.NewMessage("order-3-"+sqltest.Name("m"), nil)
					require.ErrorIs(t, inboxtest.Deliver(w.ib.Middleware(inboxtest.FailAfter(1, h)), msg).Err, inboxtest.ErrInjected)
					require.NoError(t, inboxtest.Deliver(w.ib.Middleware(inboxtest.HandlerFunc(h)), msg).Err)
				}
				failThenRedeliver(w.bindings()["inboxgorm.DB"])
				require.EqualValues(t, 190, w.cents(t), "bound to the inbox: applied once")
				failThenRedeliver(w.trap)
				require.EqualValues(t, 190+2*190, w.cents(t), "the trap: the rolled-back delivery's credit stayed, the redelivery applied it again")

				err := inboxtest.CheckOnce(w.ib.Middleware, w.trap, message.NewMessage("order-4", nil),
					func() (any, error) { return w.cents(t), nil })
				require.ErrorIs(t, err, inboxtest.ErrEscaped, "the kit detects the trap")
			})

			t.Run("no inbox transaction", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, d)
				for _, ctx := range []context.Context{context.Background(), inbox.ContextWithTx(context.Background(), pgx.Tx(nil))} {
					_, err := inboxgorm.DB(ctx, w.gdb)
					require.ErrorIs(t, err, inboxgorm.ErrNoTx)
					require.ErrorIs(t, err, inbox.ErrNoTx, "the inbox's own sentinel matches too")
					require.Equal(t, 1, strings.Count(err.Error(), "inboxgorm:"), "%q", err)
				}
			})
		})
	}
}
