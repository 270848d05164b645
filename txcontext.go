package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

type txContextKey struct{}

// ContextWithTx returns a copy of ctx that carries tx. The middleware uses it to hand its
// transaction to the handler. Use it in tests to run a handler against a transaction of
// your own; and note that the middleware joins a transaction it finds in the message
// context instead of beginning one (the key then commits or rolls back with that
// transaction, which its owner ends). ContextWithTx(ctx, nil) hides a transaction ctx
// carries: the inbox then begins its own (inboxhttp does, since it must commit before
// it answers).
func ContextWithTx(ctx context.Context, tx any) context.Context {
	return context.WithValue(ctx, txContextKey{}, tx)
}

// TxFromContext returns the inbox transaction carried by ctx, if it is a T: pgx.Tx with
// PostgresStore, *sql.Tx with SQLPostgresStore and MySQLStore. Check ok: a handler
// that asks for the wrong type gets a nil T. RequireTx says instead what ctx holds.
//
//	tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
//	if !ok {
//		return errors.New("no pgx.Tx: is the handler behind the inbox middleware?")
//	}
//
// The handler writes through the transaction and must not commit or roll it back: the
// middleware commits when the handler returns nil, and rolls back when it returns an
// error or panics. A handler that ends it anyway makes the middleware return ErrTxDone.
func TxFromContext[T any](ctx context.Context) (T, bool) {
	tx, ok := ctx.Value(txContextKey{}).(T)
	return tx, ok
}

// RequireTx is TxFromContext for handlers that return an error when the transaction is
// not there: the error wraps ErrNoTx and names the type ctx does hold (a pgx.Tx where a
// *sql.Tx was asked for means the store is PostgresStore, not SQLPostgresStore), or says
// that ctx holds no inbox transaction at all (the handler is not behind the middleware,
// or got another context than the message's).
//
//	tx, err := inbox.RequireTx[*sql.Tx](msg.Context())
//	if err != nil {
//		return nil, err
//	}
func RequireTx[T any](ctx context.Context) (T, error) {
	held := txFromContext(ctx)
	if tx, ok := held.(T); ok {
		return tx, nil
	}
	var zero T
	want := fmt.Sprintf("%T", &zero)[1:] // the name of T, also for an interface type
	if held == nil {
		return zero, fmt.Errorf("inbox: %w: asked for a %s, but the context holds no inbox transaction: run the handler behind the inbox middleware (or Process) and use the context it gets", ErrNoTx, want)
	}
	return zero, fmt.Errorf("inbox: %w: asked for a %s, but the context holds a %s: use inbox.TxFromContext[%s], or a store whose transactions are %s", ErrNoTx, want, txTypeName(held), txTypeName(held), want)
}

// txTypeName names the handle type a handler should ask for: the interface pgx.Tx for
// pgx's transaction types, the dynamic type otherwise.
func txTypeName(tx any) string {
	if _, ok := tx.(interface{ Conn() *pgx.Conn }); ok {
		return "pgx.Tx"
	}
	return fmt.Sprintf("%T", tx)
}

func txFromContext(ctx context.Context) any {
	return ctx.Value(txContextKey{})
}
