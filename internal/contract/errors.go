package contract

import (
	"errors"
	"strings"
)

// The stores' errors.
var (
	// ErrContended means the key could not be claimed because another transaction held it
	// and the database gave up waiting (lock wait timeout, deadlock, serialization failure).
	// Nothing was processed and nothing was marked: retry the message (nack it).
	// Transient.
	ErrContended = errors.New("inbox key contended, retry")

	// ErrTooManyAttempts means the message has started Config.MaxAttempts times without
	// committing or failing cleanly: its handler probably crashes the process. Route it with
	// Watermill's middleware.PoisonQueue. Permanent: after fixing the handler, Forget the
	// key's attempts (Store.Forget) and replay the message.
	ErrTooManyAttempts = errors.New("too many attempts without a commit")

	// ErrTxDone means the handler committed or rolled back the inbox transaction itself.
	// Only the middleware may end it: a handler returns an error to roll back. Permanent:
	// the handler has a bug.
	ErrTxDone = errors.New("the handler ended the inbox transaction")

	// ErrNoTable means the inbox table does not exist, lacks a column the store needs, or
	// is at a schema version the code does not run on: older (`inbox migrate up`
	// upgrades it), or newer and incompatible (ADR 135). Transient: the message is fine,
	// the database is not ready; create or migrate the tables, and the message comes
	// again.
	ErrNoTable = errors.New("inbox table missing")
)

// ErrAttemptsNeedConn means attempts could not be counted (Config.MaxAttempts) beside a
// joined transaction: counting needs a connection other than the one that transaction
// runs on, and the store's handle has none free, or is that very connection. Transient:
// the message is fine; a pool busier than its size delays it, and a store over a single
// connection needs its pool instead (the error says which).
var ErrAttemptsNeedConn = errors.New("attempt counting needs a connection of its own")

// ErrOutputTooLarge means the messages a handler produced are larger than the store can
// keep with the key (Config.MaxOutputBytes, or the database's own packet limit). The
// transaction rolled back; the message fails the same way on every delivery until the
// handler produces less, or the limit is raised. Permanent.
var ErrOutputTooLarge = errors.New("produced messages too large to store with the key")

// Prefix starts every error of the inbox and its stores, once.
const Prefix = "inbox: "

// chainError is an error of the inbox's whose text says "inbox: " once, however many
// of the package's errors it wraps: wrap and join drop the prefix of what they wrap.
type chainError struct {
	msg  string
	errs []error
}

func (e *chainError) Error() string { return e.msg }

func (e *chainError) Unwrap() []error { return e.errs }

// Chain returns an error of the inbox's whose text is "inbox: " and msg, and that
// wraps errs.
func Chain(msg string, errs ...error) error { return &chainError{msg: Prefix + msg, errs: errs} }

// Bare returns err's text without the inbox's prefix.
func Bare(err error) string { return strings.TrimPrefix(err.Error(), Prefix) }

// Wrap returns "inbox: <what>: <err>", err's own prefix dropped. It wraps err.
func Wrap(what string, err error) error {
	return &chainError{msg: Prefix + what + ": " + Bare(err), errs: []error{err}}
}

// Join returns the non-nil errors joined with "; ", each after the first without its
// prefix: nil when all are nil, the error itself when only one is not. It wraps them all.
func Join(errs ...error) error {
	var kept []error
	msg := ""
	for _, err := range errs {
		switch {
		case err == nil:
			continue
		case len(kept) == 0:
			msg = err.Error()
		default:
			msg += "; " + Bare(err)
		}
		kept = append(kept, err)
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return &chainError{msg: msg, errs: kept}
}

// MarkPermanent is inbox.MarkPermanent, for the stores: err marked as permanent.
func MarkPermanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// permanentError is an error that inbox.Permanent reports as permanent (it implements
// inbox.PermanentError).
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func (e permanentError) Permanent() bool { return true }

// A connection pooler in transaction mode (PgBouncer's usual pool_mode) between pgx and
// PostgreSQL runs each transaction of a client connection on whichever server connection
// is free. Session state does not follow the client: pgx's statement cache (its default
// mode) prepares named statements on one server connection and finds them missing on
// the next (26000), or finds them prepared there by another client (42P05). The stores
// use no other session state: settings are set for the transaction only. See ADR 93.

// ErrStatementCache means pgx's statement cache (default_query_exec_mode=cache_statement,
// pgx's default, also under database/sql's "pgx" driver) meets a pooler that moves a
// client's transactions between server connections, such as PgBouncer in transaction
// mode: prepared statements fail there. New finds it when the pooler is visible, and a
// store call that fails with such an error wraps it. Add default_query_exec_mode=exec
// (or cache_describe, or simple_protocol) to the DSN. It is transient for a message: a
// fault of the deployment, not of the message, so a failed message is nacked and
// processed once the DSN is fixed, never sent to a poison queue.
var ErrStatementCache = errors.New("pgx's statement cache behind a transaction pooler")

// ErrAttemptsBehindPooler means MaxAttempts meets a pooler that moves a client's
// transactions between server connections (PgBouncer in transaction mode). An attempt
// holds a session lock from its start to its end (ADR 60), and such a pooler lends the
// session out between the client's transactions: the lock stays with a server connection
// other clients then use, so a clean end cannot release it (locks leak) and an attempt
// that crashed looks alive for as long as that server connection lives (MaxAttempts never
// refuses the message). Measured on PgBouncer 1.18 (ADR 96). New refuses MaxAttempts on
// such a store, and a claim that carries an attempt (a tenant's store, which New never
// saw) fails with it: set MaxAttempts to 0 for the consumers behind the pooler, or give
// their store a connection to PostgreSQL directly (or through a pooler in session mode).
// It is transient for a message: a fault of the deployment, not of the message.
var ErrAttemptsBehindPooler = errors.New("MaxAttempts behind a transaction pooler")

// errProbeFailed marks the error of a pooler probe that could not finish.
var ErrProbeFailed = errors.New("pooler probe failed")
