package inbox

import "context"

type txContextKey struct{}

// ContextWithTx returns a copy of ctx that carries tx. The middleware uses it to hand its
// transaction to the handler. Use it in tests to run a handler against a transaction of
// your own; and note that the middleware joins a transaction it finds in the message
// context instead of beginning one (the key then commits or rolls back with that
// transaction, which its owner ends).
func ContextWithTx(ctx context.Context, tx any) context.Context {
	return context.WithValue(ctx, txContextKey{}, tx)
}

// TxFromContext returns the inbox transaction carried by ctx, if it is a T: pgx.Tx with
// PostgresStore, *sql.Tx with SQLPostgresStore and MySQLStore.
//
//	tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
//
// The handler writes through the transaction and must not commit or roll it back: the
// middleware commits when the handler returns nil, and rolls back when it returns an
// error or panics. A handler that ends it anyway makes the middleware return ErrTxDone.
func TxFromContext[T any](ctx context.Context) (T, bool) {
	tx, ok := ctx.Value(txContextKey{}).(T)
	return tx, ok
}

func txFromContext(ctx context.Context) any {
	return ctx.Value(txContextKey{})
}
