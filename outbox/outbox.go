// Package outbox publishes the messages an inbox handler emits through watermill-sql, in
// the inbox's own transaction, wrapped for Watermill's Forwarder (components/forwarder),
// which then moves them to the broker.
//
// The inbox makes a handler's database writes happen once per message. Messages the
// handler emits must be written in the same transaction, or a crash between the commit
// and the publish loses them (publish after commit) or sends them for a rolled-back
// effect (publish before). With this package the emitted messages are outbox rows: they
// commit with the handler's writes and the inbox key, and roll back with them.
//
//	ob, _ := outbox.New(outbox.Config{ForwarderTopic: "outbox"})
//	func handle(msg *message.Message) error {
//		// ... write through inbox.TxFromContext[pgx.Tx](msg.Context())
//		id, err := outbox.MessageIDFromContext(msg.Context(), "CashbackCredited")
//		if err != nil {
//			return err
//		}
//		return ob.Publish(msg.Context(), "cashback", message.NewMessage(id, payload))
//	}
//
// A Forwarder reading the outbox table (watermill-sql subscriber) and publishing to the
// broker delivers the messages at least once, with the UUIDs they were published with:
// a consumer behind an inbox downstream deduplicates a message forwarded twice.
//
// A handler whose context carries a span (a tracing middleware such as
// inboxotel.Tracing) emits messages that carry its trace: the outbox starts an "outbox
// send <topic>" span and writes its W3C traceparent into their metadata, which the next
// consumer's tracing middleware continues. Without a span nothing is written.
//
// It is its own package so that the root package does not import watermill-sql or
// OpenTelemetry.
package outbox

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/watermill-inbox/inbox"
)

// DefaultForwarderTopic is the outbox topic when Config.ForwarderTopic is empty. With
// watermill-sql's default PostgreSQL schema its table is "watermill_outbox".
const DefaultForwarderTopic = "outbox"

// ErrNoTx is inbox.ErrNoTx, returned (wrapped) when the context carries no inbox
// transaction that an outbox publisher can write through, or no claim to derive an id
// from: the context is not the one the inbox gave a handler. errors.Is matches it as
// outbox.ErrNoTx and as inbox.ErrNoTx. It is permanent (inbox.Permanent): the handler
// is not behind the inbox, or did not pass the context the inbox gave it.
var ErrNoTx = inbox.ErrNoTx

// Config configures an Outbox.
type Config struct {
	// ForwarderTopic is the watermill-sql topic the emitted messages are written to,
	// wrapped in the Forwarder's envelope, and that the Forwarder reads
	// (forwarder.Config.ForwarderTopic). Defaults to DefaultForwarderTopic.
	ForwarderTopic string

	// SchemaAdapter is the watermill-sql schema of the outbox table. It must match the
	// Forwarder's subscriber. Create the table before the first publish, with
	// Outbox.InitializeSchema at startup or from your migrations: a publisher bound to a
	// transaction cannot create it. Defaults to sql.DefaultPostgreSQLSchema{}; use
	// sql.DefaultMySQLSchema{} on MySQL and MariaDB.
	SchemaAdapter sql.SchemaAdapter

	// Logger is the watermill-sql publisher's logger. Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter

	// TracerProvider provides the tracer of the outbox's span ("outbox send <topic>",
	// a producer span, child of the span in the handler's context), started only when
	// that context carries a span. Defaults to otel.GetTracerProvider(), the global one
	// (without an SDK set there, no span is recorded, and the messages carry the
	// handler's own span context).
	TracerProvider trace.TracerProvider

	// Propagator writes the trace context into the emitted messages' metadata (and the
	// Forwarder's envelopes), when the handler's context carries a span. Set
	// otel.GetTextMapPropagator() to use the process's, or
	// propagation.NewCompositeTextMapPropagator() (none) to write nothing. Defaults to
	// propagation.TraceContext{}: W3C traceparent and tracestate, which
	// inboxotel.Tracing reads.
	Propagator propagation.TextMapPropagator
}

// Outbox builds publishers bound to the inbox transaction of a handler's context.
type Outbox struct {
	cfg Config
}

// New returns an Outbox. It applies the defaults and checks the topic name.
func New(cfg Config) (*Outbox, error) {
	if cfg.ForwarderTopic == "" {
		cfg.ForwarderTopic = DefaultForwarderTopic
	}
	if cfg.SchemaAdapter == nil {
		cfg.SchemaAdapter = sql.DefaultPostgreSQLSchema{}
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	if !validTopic(cfg.ForwarderTopic) {
		return nil, fmt.Errorf("outbox: invalid config: ForwarderTopic %q: use letters, digits and . - _ $ : (it becomes a table name)", cfg.ForwarderTopic)
	}
	return &Outbox{cfg: cfg}, nil
}

// Config returns the configuration with its defaults applied, for building the
// Forwarder and its subscriber with the same topic and schema.
func (o *Outbox) Config() Config { return o.cfg }

// InitializeSchema creates the outbox table of Config.ForwarderTopic if it does not exist,
// with Config.SchemaAdapter's DDL, as the Forwarder's watermill-sql subscriber would with
// SubscribeInitialize; no subscriber is needed. Call it at startup, before the first
// handler publishes: a publisher bound to the inbox transaction cannot create the table.
// db is the database the inbox runs on, wrapped for watermill-sql:
//
//	err := ob.InitializeSchema(ctx, sql.BeginnerFromPgx(pool)) // *pgxpool.Pool, *pgx.Conn
//	err := ob.InitializeSchema(ctx, sql.BeginnerFromStdSQL(db)) // *sql.DB
//
// The statements run in one transaction of their own when the schema adapter asks for
// one (PostgreSQL's, under an advisory lock, so that processes starting together do not
// race). The Forwarder's subscriber still creates its offsets table itself
// (sql.SubscriberConfig.InitializeSchema). Running it again changes nothing.
func (o *Outbox) InitializeSchema(ctx context.Context, db sql.Beginner) error {
	if db == nil {
		return errors.New("outbox: InitializeSchema: db is nil: pass sql.BeginnerFromPgx(pool) or sql.BeginnerFromStdSQL(db)")
	}
	queries, err := o.cfg.SchemaAdapter.SchemaInitializingQueries(sql.SchemaInitializingQueriesParams{Topic: o.cfg.ForwarderTopic})
	if err != nil {
		return fmt.Errorf("outbox: the schema adapter gave no DDL for topic %q: %w", o.cfg.ForwarderTopic, err)
	}
	run := func(ctx context.Context, exec sql.ContextExecutor) error {
		for _, q := range queries {
			if _, err := exec.ExecContext(ctx, q.Query, q.Args...); err != nil {
				return fmt.Errorf("outbox: creating the outbox table of topic %q: %w", o.cfg.ForwarderTopic, err)
			}
		}
		return nil
	}
	if rt, ok := o.cfg.SchemaAdapter.(sql.RequiresTransaction); !ok || !rt.RequiresTransaction() {
		return run(ctx, db)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: creating the outbox table of topic %q: beginning a transaction: %w", o.cfg.ForwarderTopic, err)
	}
	if err := run(ctx, tx); err != nil {
		if rollbackErr := tx.Rollback(); rollbackErr != nil {
			err = fmt.Errorf("%w (the rollback failed too: %v)", err, rollbackErr)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: creating the outbox table of topic %q: committing: %w", o.cfg.ForwarderTopic, err)
	}
	return nil
}

// Publisher returns a publisher that writes messages to the outbox table through the inbox
// transaction that ctx carries: a pgx.Tx (PostgresStore) or a *sql.Tx (the database/sql
// stores). Messages published to a topic go in the Forwarder's envelope, and reach that
// topic when the Forwarder moves them; they commit and roll back with the transaction.
//
// Use it only while the handler runs, and one publisher per message: the transaction ends
// when the handler returns. The inserts run with ctx, not with each message's context. Do
// not commit or roll back through the publisher: the middleware ends the transaction (the
// pgx adapter of watermill-sql cannot: sql.TxFromPgx keeps no context). Closing the
// publisher is not needed and does not touch the transaction.
func (o *Outbox) Publisher(ctx context.Context) (message.Publisher, error) {
	var db sql.ContextExecutor
	if tx, ok := inbox.TxFromContext[pgx.Tx](ctx); ok {
		db = sql.TxFromPgx(tx)
	} else if tx, ok := inbox.TxFromContext[*stdsql.Tx](ctx); ok {
		db = sql.TxFromStdSQL(tx)
	} else {
		return nil, fmt.Errorf("outbox: %w: publish from a handler behind the inbox middleware (or inside Inbox.Process), with the message's context; the transaction must be a pgx.Tx or a *sql.Tx", ErrNoTx)
	}
	pub, err := sql.NewPublisher(db, sql.PublisherConfig{SchemaAdapter: o.cfg.SchemaAdapter}, o.cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("outbox: creating the SQL publisher: %w", err)
	}
	return outboxPublisher{o: o, ctx: ctx, pub: pub}, nil
}

// Publish writes msgs for topic to the outbox through the inbox transaction in ctx: it is
// Publisher(ctx) followed by Publish.
func (o *Outbox) Publish(ctx context.Context, topic string, msgs ...*message.Message) error {
	pub, err := o.Publisher(ctx)
	if err != nil {
		return err
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		return fmt.Errorf("outbox: writing %d message(s) for topic %q: %w", len(msgs), topic, err)
	}
	return nil
}

// outboxPublisher is what Publisher returns: each Publish starts the outbox's span
// when the handler's context carries a span, writes the trace context into the
// messages' metadata, and wraps them in the Forwarder's envelopes for the SQL
// publisher.
type outboxPublisher struct {
	o   *Outbox
	ctx context.Context
	pub message.Publisher
}

func (p outboxPublisher) Publish(topic string, msgs ...*message.Message) error {
	ctx, end := p.o.startSpan(p.ctx, topic, msgs)
	for _, m := range msgs {
		p.o.inject(ctx, m)
	}
	envelopes := forwarder.NewPublisher(contextPublisher{o: p.o, ctx: ctx, pub: p.pub},
		forwarder.PublisherConfig{ForwarderTopic: p.o.cfg.ForwarderTopic})
	err := envelopes.Publish(topic, msgs...)
	end(err)
	return err
}

func (p outboxPublisher) Close() error { return p.pub.Close() }

// contextPublisher gives the envelopes the handler's context (with the outbox's span)
// and its trace context before the SQL publisher inserts them: watermill-sql runs the
// insert with the first message's context, and an emitted message usually has none.
type contextPublisher struct {
	o   *Outbox
	ctx context.Context
	pub message.Publisher
}

func (p contextPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		m.SetContext(p.ctx) // the forwarder's envelopes, never the caller's messages
		p.o.inject(p.ctx, m)
	}
	return p.pub.Publish(topic, msgs...)
}

func (p contextPublisher) Close() error { return p.pub.Close() }

func validTopic(topic string) bool {
	for _, r := range topic {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune(".-_$:", r):
		default:
			return false
		}
	}
	return topic != ""
}
