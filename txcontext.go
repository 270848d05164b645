package inbox

import (
	"bytes"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox/internal/contract"
)

type claimContextKey struct{}

// ContextWithTx returns a copy of ctx that carries tx. The middleware uses it to hand its
// transaction to the handler. Use it in tests to run a handler against a transaction of
// your own; and note that the middleware joins a transaction it finds in the message
// context instead of beginning one (the key then commits or rolls back with that
// transaction, which its owner ends). ContextWithTx(ctx, nil) hides a transaction ctx
// carries: the inbox then begins its own (inboxhttp does, since it must commit before
// it answers).
func ContextWithTx(ctx context.Context, tx any) context.Context {
	return contract.ContextWithTx(ctx, tx)
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
	tx, ok := contract.TxFromContext(ctx).(T)
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
	held := contract.TxFromContext(ctx)
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

// ClaimFromContext returns the key the inbox claimed for the message or call being
// handled, in the context the handler got (the message's, behind Middleware; the one fn
// gets from Process, ProcessResult and ProcessJSON; the request's, behind inboxhttp):
// Record.Consumer is the consumer the key belongs to (Config.Consumer, the Watermill
// handler name, or the one passed to Process), Record.Key is the key as stored, which
// may differ from what the KeyFunc returned (see MaxKeyLen), and Record.Tenant the
// tenant it was claimed in (empty without one). Together they name the message once and
// for all, on every delivery, whatever KeyFunc found the key: the same key in two
// tenants is two messages. Derive ids of what the handler emits from all three
// (outbox.MessageIDFromContext does).
//
// Record.Fingerprint is the one stored with the key; Record.Attempt is empty. ok is false
// outside a handler run by the inbox, e.g. for a handler given a transaction of its own
// with ContextWithTx.
func ClaimFromContext(ctx context.Context) (rec Record, ok bool) {
	rec, ok = ctx.Value(claimContextKey{}).(Record)
	return rec, ok
}

// contextWithClaim returns ctx with the claimed record, and the tenant ctx carries, for
// the handler.
func contextWithClaim(ctx context.Context, rec Record) context.Context {
	rec.Fingerprint = bytes.Clone(rec.Fingerprint)
	rec.Attempt = "" // the attempt's token is the inbox's bookkeeping, not the message's
	rec.Tenant, _ = TenantFromContext(ctx)
	return context.WithValue(ctx, claimContextKey{}, rec)
}
