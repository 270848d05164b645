package inbox

import (
	"errors"

	"github.com/watermill-inbox/inbox/internal/contract"
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

// Errors of the stores: each store returns them, wrapped, for the same causes.
var (
	// ErrContended means the key could not be claimed because another transaction held it
	// and the database gave up waiting (lock wait timeout, deadlock, serialization failure).
	// Nothing was processed and nothing was marked: retry the message (nack it).
	// Transient.
	ErrContended = contract.ErrContended

	// ErrTooManyAttempts means the message has started Config.MaxAttempts times without
	// committing or failing cleanly: its handler probably crashes the process. Route it with
	// Watermill's middleware.PoisonQueue. Permanent: after fixing the handler, Forget the
	// key's attempts (Store.Forget) and replay the message.
	ErrTooManyAttempts = contract.ErrTooManyAttempts

	// ErrTxDone means the handler committed or rolled back the inbox transaction itself.
	// Only the middleware may end it: a handler returns an error to roll back. Permanent:
	// the handler has a bug.
	ErrTxDone = contract.ErrTxDone

	// ErrNoTable means the inbox table does not exist or lacks a column the store needs.
	// Transient: the message is fine, the database is not ready; create or migrate the
	// tables, and the message comes again.
	ErrNoTable = contract.ErrNoTable

	// ErrAttemptsNeedConn means attempts could not be counted (Config.MaxAttempts) beside a
	// joined transaction: counting needs a connection other than the one that transaction
	// runs on, and the store's handle has none free, or is that very connection. Transient:
	// the message is fine; a pool busier than its size delays it, and a store over a single
	// connection needs its pool instead (the error says which).
	ErrAttemptsNeedConn = contract.ErrAttemptsNeedConn

	// ErrOutputTooLarge means the messages a handler produced are larger than the store can
	// keep with the key (Config.MaxOutputBytes, or the database's own packet limit). The
	// transaction rolled back; the message fails the same way on every delivery until the
	// handler produces less, or the limit is raised. Permanent.
	ErrOutputTooLarge = contract.ErrOutputTooLarge

	// ErrStatementCache means pgx's statement cache (default_query_exec_mode=cache_statement,
	// pgx's default, also under database/sql's "pgx" driver) meets a pooler that moves a
	// client's transactions between server connections, such as PgBouncer in transaction
	// mode: prepared statements fail there. New finds it when the pooler is visible, and a
	// store call that fails with such an error wraps it. Add default_query_exec_mode=exec
	// (or cache_describe, or simple_protocol) to the DSN. It is transient for a message: a
	// fault of the deployment, not of the message, so a failed message is nacked and
	// processed once the DSN is fixed, never sent to a poison queue.
	ErrStatementCache = contract.ErrStatementCache

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
	ErrAttemptsBehindPooler = contract.ErrAttemptsBehindPooler
)
