package inbox

import (
	"errors"
	"strings"
)

// Errors the inbox returns, always wrapped with the message UUID or the store call that failed.
// Match them with errors.Is. Each is permanent (the message cannot succeed as it is,
// however often it comes again: poison it) or transient (retry it: nack); Permanent
// tells them apart, and docs/errors.md is the table.
var (
	// ErrNoKey means no inbox key could be derived from a message. The message was not
	// processed: a message is never handled without deduplication. Fix the producer, or
	// choose a KeyFunc that finds the key (see FirstOf), or route such messages to a
	// poison queue (middleware.PoisonQueueWithFilter). Permanent.
	ErrNoKey = errors.New("no inbox key")

	// ErrNoConsumer means no consumer name was known for a message: Config.Consumer is
	// empty and the message was not routed by a Watermill Router (which names the handler).
	// Permanent: set Config.Consumer.
	ErrNoConsumer = errors.New("no inbox consumer name")

	// ErrDuplicate is returned for a duplicate when Config.OnDuplicate (or OnMismatch) is
	// Fail. The handler was not called. Permanent: the key stays committed.
	ErrDuplicate = errors.New("duplicate message")

	// ErrFingerprintMismatch marks a duplicate whose fingerprint differs from the one stored
	// with its key: the same key on a different message, a producer bug or a key collision.
	// It is returned, wrapped together with ErrDuplicate, when Config.OnMismatch is Fail.
	// Permanent.
	ErrFingerprintMismatch = errors.New("same inbox key, different message")

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

	// ErrNoTable means the inbox table does not exist or lacks a column the store needs.
	// Transient: the message is fine, the database is not ready; create or migrate the
	// tables, and the message comes again.
	ErrNoTable = errors.New("inbox table missing")

	// ErrRetention means a purge was refused because its cutoff is younger than
	// PurgeConfig.MinRetention: a message older than the cutoff can still come back (topic
	// retention, DLQ replay), and once its key is purged it would be processed again.
	// Permanent: the same purge is refused again (raise OlderThan, or set Force).
	ErrRetention = errors.New("purge cutoff younger than the minimum retention")
)

// ErrNoTx means the context carries no inbox transaction of the type asked for (see
// RequireTx). Permanent: the handler asks for another store's transaction type, or runs
// outside the middleware.
var ErrNoTx = errors.New("no inbox transaction of that type in the context")

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

// prefix starts every error this package makes, once.
const prefix = "inbox: "

// chainError is an error of this package whose text says "inbox: " once, however many
// of the package's errors it wraps: wrap and join drop the prefix of what they wrap.
type chainError struct {
	msg  string
	errs []error
}

func (e *chainError) Error() string   { return e.msg }
func (e *chainError) Unwrap() []error { return e.errs }

// bare returns err's text without this package's prefix.
func bare(err error) string { return strings.TrimPrefix(err.Error(), prefix) }

// wrap returns "inbox: <what>: <err>", err's own prefix dropped. It wraps err.
func wrap(what string, err error) error {
	return &chainError{msg: prefix + what + ": " + bare(err), errs: []error{err}}
}

// join returns the non-nil errors joined with "; ", each after the first without its
// prefix: nil when all are nil, the error itself when only one is not. It wraps them all.
func join(errs ...error) error {
	var kept []error
	msg := ""
	for _, err := range errs {
		switch {
		case err == nil:
			continue
		case len(kept) == 0:
			msg = err.Error()
		default:
			msg += "; " + bare(err)
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
