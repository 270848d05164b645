// Package inboxgorm binds GORM to the inbox transaction, so that a handler's GORM writes
// commit and roll back with the message's inbox key.
//
//	gdb, _ := gorm.Open(mysql.New(mysql.Config{Conn: db}), &gorm.Config{}) // the app's handle
//	router.AddConsumerHandler("billing", "orders", sub, func(msg *message.Message) error {
//		tx, err := inboxgorm.DB(msg.Context(), gdb) // bound to the inbox's *sql.Tx
//		if err != nil {
//			return err
//		}
//		return tx.Model(&Wallet{ID: 1}).Update("cents", gorm.Expr("cents + ?", 190)).Error
//	})
//
// The inbox must run on database/sql: inbox.NewMySQLStore, or inbox.NewSQLPostgresStore
// with GORM's PostgreSQL driver (pgx's stdlib). A pgx.Tx from inbox.NewPostgresStore
// cannot carry GORM statements.
//
// The trap: gdb.Transaction(...) or gdb.Create(...) on the application's handle inside
// a handler opens a transaction of its own. It commits even when the inbox rolls back,
// and a redelivery then applies it again. Write through DB(ctx, gdb); a Transaction on
// the handle DB returns is a savepoint inside the inbox transaction. The inboxtest kit's
// CheckOnce detects a handler that falls into the trap. See docs/orm.md.
//
// It is a module of its own so that GORM enters only the builds that import it.
package inboxgorm

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/watermill-inbox/inbox"
)

// ErrNoTx is inbox.ErrNoTx, returned (wrapped) by DB when the context carries no inbox
// *sql.Tx: errors.Is matches it as inboxgorm.ErrNoTx and as inbox.ErrNoTx. It is
// permanent (inbox.Permanent): the handler is not behind the inbox, or its store is not a
// database/sql one.
var ErrNoTx = inbox.ErrNoTx

// DB returns a GORM handle on gdb's configuration whose every statement runs in the
// inbox transaction that ctx carries (the message context behind ib.Middleware, or the
// context Inbox.Process passes). The handle also carries ctx, skips GORM's default
// per-write transaction, and turns Transaction into a savepoint; it starts a new
// statement (NewDB), so conditions chained on gdb do not carry over. Use it only while
// the handler runs: the transaction ends when the handler returns.
//
// Do not Commit or Rollback through it: the inbox middleware ends the transaction.
func DB(ctx context.Context, gdb *gorm.DB) (*gorm.DB, error) {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok {
		if _, isPgx := inbox.TxFromContext[pgx.Tx](ctx); isPgx {
			return nil, fmt.Errorf("inboxgorm: %w: it holds a pgx.Tx (inbox.NewPostgresStore), which GORM cannot use: build the inbox with inbox.NewSQLPostgresStore on pgx's stdlib driver", ErrNoTx)
		}
		return nil, fmt.Errorf("inboxgorm: %w: the context holds no inbox *sql.Tx: call DB with the message context inside a handler behind ib.Middleware, or inside Inbox.Process", ErrNoTx)
	}
	bound := gdb.Session(&gorm.Session{Context: ctx, SkipDefaultTransaction: true, NewDB: true})
	bound.Statement.ConnPool = tx // as gorm's own Begin does with the *sql.Tx it begins
	return bound, nil
}
