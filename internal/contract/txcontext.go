package contract

import (
	"context"
)

// txContextKey is the context key of the inbox's transaction.
type txContextKey struct{}

// ContextWithTx returns ctx carrying tx, the transaction handlers get and the stores join.
func ContextWithTx(ctx context.Context, tx any) context.Context {
	return context.WithValue(ctx, txContextKey{}, tx)
}

// TxFromContext returns the transaction ctx carries, nil when none.
func TxFromContext(ctx context.Context) any {
	return ctx.Value(txContextKey{})
}
