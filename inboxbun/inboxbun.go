// Package inboxbun gives bun handlers a bun.Tx that the inbox joins, so that a handler's
// bun writes commit and roll back with the message's inbox key.
//
// A bun.Tx cannot be built around the inbox's *sql.Tx (bun.Tx{Tx: tx} compiles, then
// panics: its *bun.DB is unexported and nil). So the transaction is begun in bun instead,
// by a middleware outside the inbox's, and the inbox joins it:
//
//	txm, _ := inboxbun.New(inboxbun.Config{DB: bunDB})
//	router.AddMiddleware(middleware.Retry{...}.Middleware, txm.Middleware, ib.Middleware)
//	router.AddConsumerHandler("billing", "orders", sub, func(msg *message.Message) error {
//		tx, err := inboxbun.Tx(msg.Context()) // a bun.Tx; its RunInTx makes savepoints
//		if err != nil {
//			return err
//		}
//		_, err = tx.NewUpdate().Model(&Wallet{ID: 1}).Set("cents = cents + 190").WherePK().Exec(msg.Context())
//		return err
//	})
//
// Without this package, bun's per-query Conn binds one query to the inbox transaction:
// bunDB.NewUpdate().Conn(sqlTx)..., with sqlTx from inbox.TxFromContext[*sql.Tx].
//
// The trap: bunDB.RunInTx(...) or any query on the application's *bun.DB inside a
// handler runs outside the inbox transaction. It commits even when the inbox rolls back,
// and a redelivery then applies it again. The inboxtest kit's CheckOnce detects a
// handler that falls into the trap. See docs/orm.md.
//
// It is a module of its own so that bun enters only the builds that import it.
package inboxbun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/uptrace/bun"

	"github.com/watermill-inbox/inbox"
)

// ErrNoTx is returned by Tx when the context carries no transaction begun by Middleware.
// Permanent (inbox.MarkPermanent): the middlewares are not in place.
var ErrNoTx = inbox.MarkPermanent(errors.New("inboxbun: no bun transaction in the context"))

// Config configures a TxMiddleware.
type Config struct {
	// DB is the application's bun handle, on the same database as the inbox's store
	// (inbox.NewSQLPostgresStore or inbox.NewMySQLStore). Required.
	DB *bun.DB

	// TxOptions are the options of the transactions Middleware begins. The inbox joins
	// them as they are: its own isolation settings (MySQLConfig.Isolation,
	// SQLPostgresConfig.TxOptions) do not apply. Defaults to READ COMMITTED, the level the
	// inbox's own transactions run at (docs/adr/0003-read-committed.md).
	TxOptions *sql.TxOptions
}

// TxMiddleware begins a bun transaction per message for the inbox middleware to join.
type TxMiddleware struct {
	cfg Config
}

// New returns a TxMiddleware. It fails when Config.DB is nil.
func New(cfg Config) (*TxMiddleware, error) {
	if cfg.DB == nil {
		return nil, errors.New("inboxbun: invalid config: DB is nil: set it to the application's *bun.DB (bun.NewDB(sqldb, dialect))")
	}
	if cfg.TxOptions == nil {
		cfg.TxOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	return &TxMiddleware{cfg: cfg}, nil
}

type txKey struct{}

// Middleware begins a bun transaction, puts it in the message context for the inbox
// middleware to join (inbox.ContextWithTx with its *sql.Tx) and for the handler to write
// through (Tx), and commits it when the chain inside returns nil. An error, or a panic,
// rolls it back, key included, and the message is nacked; a commit that fails is
// returned, so the message is nacked and comes again.
//
// Add it right outside ib.Middleware: inside Retry and PoisonQueue, so that each retry
// gets a fresh transaction, and outside the inbox, which must find the transaction.
func (m *TxMiddleware) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) (produced []*message.Message, err error) {
		ctx := msg.Context()
		btx, err := m.cfg.DB.BeginTx(ctx, m.cfg.TxOptions)
		if err != nil {
			return nil, fmt.Errorf("inboxbun: message %s: beginning the transaction: %w", msg.UUID, err)
		}
		ended := false
		defer func() {
			msg.SetContext(ctx)
			if !ended { // h panicked
				_ = btx.Rollback()
			}
		}()
		msg.SetContext(inbox.ContextWithTx(context.WithValue(ctx, txKey{}, btx), btx.Tx))
		produced, err = h(msg)
		ended = true
		if err != nil {
			if rbErr := btx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
				err = errors.Join(err, fmt.Errorf("inboxbun: rolling back: %w", rbErr))
			}
			return nil, err
		}
		if err := btx.Commit(); err != nil {
			return nil, fmt.Errorf("inboxbun: message %s: committing: %w", msg.UUID, err)
		}
		return produced, nil
	}
}

// Tx returns the bun transaction Middleware began for the message whose context is ctx.
// Write through it while the handler runs; do not commit or roll it back: Middleware
// does. Its RunInTx and BeginTx make savepoints.
func Tx(ctx context.Context) (bun.Tx, error) {
	tx, ok := ctx.Value(txKey{}).(bun.Tx)
	if !ok {
		return bun.Tx{}, fmt.Errorf("%w: add TxMiddleware.Middleware to the router outside ib.Middleware, and call Tx with the message context", ErrNoTx)
	}
	return tx, nil
}
