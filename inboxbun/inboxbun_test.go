package inboxbun_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxbun"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// Wallet is the wallet row; its table is renamed per test with ModelTableExpr.
type Wallet struct {
	bun.BaseModel `bun:"table:wallets"`
	ID            int64 `bun:",pk"`
	Cents         int64
}

// world is one database with an inbox, a wallet table and the application's bun handle.
type world struct {
	d      sqltest.Database
	db     *sql.DB
	bdb    *bun.DB // the application-wide handle
	ib     *inbox.Inbox
	txm    *inboxbun.TxMiddleware
	wallet string
}

func newWorld(t *testing.T, d sqltest.Database) *world {
	t.Helper()
	w := &world{d: d, db: d.Open(t)}
	w.ib, w.wallet = d.Inbox(t, w.db), d.Wallet(t, w.db)
	if d.Dialect == sqltest.MySQL {
		w.bdb = bun.NewDB(w.db, mysqldialect.New())
	} else {
		w.bdb = bun.NewDB(w.db, pgdialect.New())
	}
	var err error
	w.txm, err = inboxbun.New(inboxbun.Config{DB: w.bdb})
	require.NoError(t, err)
	return w
}

// credit adds 190 cents through idb, a bun.Tx or the *bun.DB; conn, when not nil, binds
// the query to it.
func (w *world) credit(ctx context.Context, idb bun.IDB, conn bun.IConn) error {
	q := idb.NewUpdate().Model((*Wallet)(nil)).ModelTableExpr("?", bun.Ident(w.wallet)).
		Set("cents = cents + ?", 190).Where("id = ?", 1)
	if conn != nil {
		q = q.Conn(conn)
	}
	_, err := q.Exec(ctx)
	return err
}

func (w *world) cents(t *testing.T) int64 { return w.d.Cents(t, w.db, w.wallet) }

// binding is a correct way to write through the inbox transaction with bun: the
// middleware chain and the handler.
type binding struct {
	mw message.HandlerMiddleware
	h  func(*message.Message) error
}

func (w *world) bindings() map[string]binding {
	return map[string]binding{
		"inboxbun.TxMiddleware, the inbox joins": {
			mw: func(h message.HandlerFunc) message.HandlerFunc { return w.txm.Middleware(w.ib.Middleware(h)) },
			h: func(msg *message.Message) error {
				tx, err := inboxbun.Tx(msg.Context())
				if err != nil {
					return err
				}
				return w.credit(msg.Context(), tx, nil)
			},
		},
		"per-query Conn(tx)": {
			mw: w.ib.Middleware,
			h: func(msg *message.Message) error {
				tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
				return w.credit(msg.Context(), w.bdb, tx)
			},
		},
	}
}

// trap runs a transaction on the application's handle: it escapes the inbox.
func (w *world) trap(msg *message.Message) error {
	return w.bdb.RunInTx(msg.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		return w.credit(ctx, tx, nil)
	})
}

func TestBun(t *testing.T) {
	t.Parallel()
	for _, d := range sqltest.Databases() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			for name := range newWorld(t, d).bindings() {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					w := newWorld(t, d)
					b := w.bindings()[name]
					require.NoError(t, inboxtest.CheckOnce(b.mw, b.h, message.NewMessage("order-1", nil),
						func() (any, error) { return w.cents(t), nil }))
					require.EqualValues(t, 190, w.cents(t))
				})
			}

			t.Run("RunInTx on the joined bun.Tx is a savepoint", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, d)
				errInner := errors.New("inner step failed")
				h := func(msg *message.Message) error {
					tx, err := inboxbun.Tx(msg.Context())
					if err != nil {
						return err
					}
					if err := w.credit(msg.Context(), tx, nil); err != nil {
						return err
					}
					err = tx.RunInTx(msg.Context(), nil, func(ctx context.Context, sp bun.Tx) error {
						if err := w.credit(ctx, sp, nil); err != nil {
							return err
						}
						return errInner // rolls back to the savepoint: the second credit only
					})
					if !errors.Is(err, errInner) {
						return err
					}
					return nil
				}
				chain := w.txm.Middleware(w.ib.Middleware(inboxtest.FailAfter(1, h)))
				require.ErrorIs(t, inboxtest.Deliver(chain, message.NewMessage("order-2", nil)).Err, inboxtest.ErrInjected)
				require.Zero(t, w.cents(t), "the savepoint and what it kept rolled back with the inbox")
				require.NoError(t, inboxtest.Deliver(chain, message.NewMessage("order-2", nil)).Err)
				require.EqualValues(t, 190, w.cents(t), "the outer credit committed, the savepoint's rolled back")
				again := inboxtest.Deliver(chain, message.NewMessage("order-2", nil))
				require.NoError(t, again.Err)
				require.True(t, again.Duplicate, "the key committed with the joined transaction")
			})

			t.Run("the trap: a transaction on the app-wide handle", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, d)
				failThenRedeliver := func(mw message.HandlerMiddleware, h func(*message.Message) error) {
					msg := message.NewMessage("order-3-"+sqltest.Name("m"), nil)
					require.ErrorIs(t, inboxtest.Deliver(mw(inboxtest.FailAfter(1, h)), msg).Err, inboxtest.ErrInjected)
					require.NoError(t, inboxtest.Deliver(mw(inboxtest.HandlerFunc(h)), msg).Err)
				}
				for _, b := range w.bindings() {
					failThenRedeliver(b.mw, b.h)
				}
				require.EqualValues(t, 2*190, w.cents(t), "bound to the inbox: each message applied once")
				failThenRedeliver(w.ib.Middleware, w.trap)
				require.EqualValues(t, 2*190+2*190, w.cents(t), "the trap: the rolled-back delivery's credit stayed, the redelivery applied it again")

				err := inboxtest.CheckOnce(w.ib.Middleware, w.trap, message.NewMessage("order-4", nil),
					func() (any, error) { return w.cents(t), nil })
				require.ErrorIs(t, err, inboxtest.ErrEscaped, "the kit detects the trap")
			})

			t.Run("a bun.Tx cannot wrap the inbox's *sql.Tx", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, d)
				h := func(msg *message.Message) error {
					tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
					require.Panics(t, func() { _ = w.credit(msg.Context(), bun.Tx{Tx: tx}, nil) })
					return nil
				}
				require.NoError(t, inboxtest.Deliver(w.ib.Middleware(inboxtest.HandlerFunc(h)), message.NewMessage("order-5", nil)).Err)
			})

			t.Run("no bun transaction", func(t *testing.T) {
				t.Parallel()
				_, err := inboxbun.Tx(context.Background())
				require.ErrorIs(t, err, inboxbun.ErrNoTx)
			})
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := inboxbun.New(inboxbun.Config{})
	require.ErrorContains(t, err, "DB is nil")
}
