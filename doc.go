// Package inbox makes Watermill message consumers exactly-once in their effects, with a
// transactional inbox.
//
// The guarantee: for each consumer, a message's database effects are applied once,
// however often the broker delivers it. The middleware inserts the message's key
// (consumer + key) into an inbox table in the same transaction as the handler's writes,
// before the handler runs, and commits before the router acks. A redelivery finds the
// key and is skipped; a handler that fails rolls its key back with its writes, so the
// next delivery processes it; a concurrent duplicate waits on the first transaction's
// index entry, then skips (the first committed) or processes (it rolled back).
//
// Effects outside the transaction (HTTP calls, e-mails) are not covered: make those
// idempotent, or record them through the transaction (an outbox).
//
// Usage:
//
//	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{}) // *pgxpool.Pool
//	ib, err := inbox.New(inbox.Config{Store: store})
//	router.AddMiddleware(ib.Middleware)
//	router.AddConsumerHandler("billing", "orders", sub, func(msg *message.Message) error {
//		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
//		_, err := tx.Exec(msg.Context(), "UPDATE wallets SET cents = cents + 190 WHERE id = $1", "alice")
//		return err
//	})
//
// The handler's context carries the inbox transaction (TxFromContext, RequireTx) and the
// claim: the consumer, the key as stored and the tenant (ClaimFromContext), from which
// the handler can derive stable ids for what it emits (outbox.MessageIDFromContext).
//
// The consumer defaults to the Watermill handler name and scopes deduplication: set
// Config.Consumer explicitly in production, so that renaming a handler does not make
// every message it processed new again.
//
// Keys come from a KeyFunc: the Watermill UUID by default, or metadata, CloudEvents
// attributes, a JSON payload field, or the first of several (FirstOf). A message without
// a key is never processed without deduplication: it fails with ErrNoKey.
//
// The messages a handler returns are stored with its key, and a duplicate returns them
// again (Replay, the default), because the router publishes them after the middleware
// has committed: if that publish fails, the redelivery still sends them.
//
// Tenants: a TenantStore routes each message to its tenant's store — a database, a
// schema (PostgresConfig.Schema and SearchPath) or a key prefix per tenant — from the
// tenant the middleware derives (Config.Tenant) and carries in the context
// (ContextWithTenant). A message without a known tenant fails with ErrNoTenant or
// ErrUnknownTenant, permanently, before anything is written.
//
// Behind PgBouncer in transaction mode, pgx needs default_query_exec_mode=exec (or
// simple_protocol): New refuses its statement cache there with ErrStatementCache.
//
// Stores: PostgresStore (pgx), SQLPostgresStore and MySQLStore (database/sql). Process
// offers the same behaviour outside Watermill, and ProcessResult (or ProcessJSON) also
// stores the caller's result with the key and returns it to every retry, for requests
// that must get the same answer; the inboxhttp package builds a net/http idempotency
// middleware on it.
//
// For Kafka at full speed: ProcessBatch (and ProcessBatchOf) claims the keys of many
// messages in one statement and runs the handler once with the new ones, where the store
// is a BatchStore; the inboxkgo package runs a franz-go consumer loop on it. Offset mode
// (Config.Position, ProcessOffsets) keeps one row per consumer, topic and partition
// instead of a key per message, for subscribers that deliver each partition in order,
// where the store is an OffsetStore. docs/kafka.md says when to use which.
package inbox
