package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxotel"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/outbox"
)

// traced is a chain of consumer A (billing, behind the inbox), the outbox, the
// Forwarder (to GoChannel) and consumer B (receipts, behind its own inbox), with every
// span recorded in memory.
type traced struct {
	spans    *tracetest.InMemoryExporter
	tracer   trace.Tracer
	billing  message.HandlerFunc // A: Tracing → inbox → emits "cashback" through the outbox
	receipts message.HandlerFunc // B: Tracing → inbox
	cashback <-chan *message.Message
	ob       *outbox.Outbox
	rows     func() []string
}

func newTraced(t *testing.T, traceA bool) traced {
	t.Helper()
	pool := pgPool(t)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := inboxotel.NewTracing(inboxotel.TracingConfig{TracerProvider: tp})
	obs, err := inboxotel.New(inboxotel.Config{})
	require.NoError(t, err)
	ob, err := outbox.New(outbox.Config{ForwarderTopic: sqltest.Name("outbox"), TracerProvider: tp})
	require.NoError(t, err)
	createOutboxSchema(t, pool, ob)

	a, err := inbox.New(inbox.Config{Store: pgStore(t, pool), Observer: obs})
	require.NoError(t, err)
	b, err := inbox.New(inbox.Config{Store: pgStore(t, pool), Observer: obs})
	require.NoError(t, err)

	broker := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = broker.Close() })
	cashback, err := broker.Subscribe(context.Background(), "cashback")
	require.NoError(t, err)
	fwd, err := forwarder.NewForwarder(outboxSubscriber(t, pool, ob, "forwarder"), broker, watermill.NopLogger{},
		forwarder.Config{ForwarderTopic: ob.Config().ForwarderTopic, CloseTimeout: 5 * time.Second,
			Middlewares: []message.HandlerMiddleware{tr.Middleware}})
	require.NoError(t, err)
	runUntilCleanup(t, fwd.Run, fwd.Running(), fwd.Close)

	billing := a.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		id, err := outbox.MessageIDFromContext(msg.Context(), "CashbackCredited")
		if err != nil {
			return nil, err
		}
		if err := ob.Publish(msg.Context(), "cashback", message.NewMessage(id, []byte(`{"cents":190}`))); err != nil {
			return nil, err
		}
		audit := message.NewMessage(watermill.NewUUID(), []byte(`{"audit":"credited"}`)) // returned: stored, replayed on a duplicate
		audit.Metadata.Set("kind", "audit")
		return []*message.Message{audit}, nil
	})
	if traceA {
		billing = tr.Middleware(billing)
	}
	receipts := tr.Middleware(b.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil }))
	return traced{spans: spans, tracer: tp.Tracer("test"), billing: billing, receipts: receipts, cashback: cashback, ob: ob,
		rows: func() []string { return outboxRows(t, pool, ob) }}
}

// pgStore returns a PostgresStore on a fresh table of pool.
func pgStore(t *testing.T, pool *pgxpool.Pool) inbox.Store {
	t.Helper()
	table := sqltest.Name("inbox")
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(context.Background()))
	dropLater(t, pool, table, table+"_attempts", table+"_offsets")
	return store
}

// forward waits for the next message the Forwarder delivered, and passes it to B.
func (c traced) forward(t *testing.T) *message.Message {
	t.Helper()
	select {
	case got := <-c.cashback:
		_, err := c.receipts(inboxtest.Routed("receipts", got))
		require.NoError(t, err)
		got.Ack() // after the handler: GoChannel ends the message's context at the ack
		return got
	case <-time.After(30 * time.Second):
		t.Fatal("the Forwarder did not deliver within 30 s")
		return nil
	}
}

// span returns the one recorded span named name whose trace is traceID.
func (c traced) span(t *testing.T, name string, traceID trace.TraceID) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range c.spans.GetSpans() {
		if s.Name == name && s.SpanContext.TraceID() == traceID {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "spans named %q in trace %s", name, traceID)
	return found[0]
}

func attr(s tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

// One trace spans consumer A, the outbox, the Forwarder and consumer B: A continues
// the trace its message carries, the outbox's span is A's child, the Forwarder's and
// B's spans are the outbox span's. A replayed duplicate continues its own delivery's
// trace, emits nothing through the outbox, and replays A's returned output as it was
// stored.
func TestTraceSpansTwoConsumersJoinedByTheOutbox(t *testing.T) {
	t.Parallel()
	c := newTraced(t, true)
	forwarderTopic := c.ob.Config().ForwarderTopic

	// An upstream producer's span, its trace in the order's metadata.
	upstreamCtx, upstream := c.tracer.Start(context.Background(), "upstream send orders", trace.WithSpanKind(trace.SpanKindProducer))
	order := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"order-1"}`))
	propagation.TraceContext{}.Inject(upstreamCtx, propagation.MapCarrier(order.Metadata))
	upstream.End()
	traceID := upstream.SpanContext().TraceID()

	first, err := c.billing(inboxtest.Routed("billing", order.Copy()))
	require.NoError(t, err)
	got := c.forward(t)

	a := c.span(t, "process billing", traceID)
	send := c.span(t, "outbox send cashback", traceID)
	fwd := c.span(t, "process "+forwarderTopic, traceID)
	b := c.span(t, "process receipts", traceID)
	require.Equal(t, upstream.SpanContext().SpanID(), a.Parent.SpanID(), "A continues the order's trace")
	require.True(t, a.Parent.IsRemote())
	require.Equal(t, trace.SpanKindConsumer, a.SpanKind)
	require.Equal(t, "processed", attr(a, inboxotel.AttrOutcome), "the inbox's observer annotates A's span")
	require.Equal(t, a.SpanContext.SpanID(), send.Parent.SpanID(), "the outbox's span is A's child")
	require.Equal(t, trace.SpanKindProducer, send.SpanKind)
	require.Equal(t, send.SpanContext.SpanID(), fwd.Parent.SpanID(), "the Forwarder continues the envelope's trace")
	require.Equal(t, send.SpanContext.SpanID(), b.Parent.SpanID(), "B continues the message's trace")
	require.Equal(t, "processed", attr(b, inboxotel.AttrOutcome))
	require.Equal(t, "00-"+traceID.String()+"-"+send.SpanContext.SpanID().String()+"-01", got.Metadata.Get("traceparent"),
		"the message carries the outbox span's W3C traceparent")

	// The order delivered again: a duplicate, in its delivery's trace, which emits
	// nothing and replays what A returned the first time, as stored.
	replayed, err := c.billing(inboxtest.Routed("billing", order.Copy()))
	require.NoError(t, err)
	require.Len(t, replayed, 1)
	require.Equal(t, first[0].UUID, replayed[0].UUID)
	require.Equal(t, first[0].Metadata, replayed[0].Metadata, "the replayed output is the stored one, metadata included")
	var dups []tracetest.SpanStub
	for _, s := range c.spans.GetSpans() {
		if s.Name == "process billing" && s.SpanContext.TraceID() == traceID && attr(s, inboxotel.AttrOutcome) == "replayed" {
			dups = append(dups, s)
		}
	}
	require.Len(t, dups, 1, "the duplicate's span, in the order's trace")
	require.Equal(t, upstream.SpanContext().SpanID(), dups[0].Parent.SpanID())
	require.Len(t, c.rows(), 1, "the duplicate wrote nothing to the outbox")

	// A second order: the next message the Forwarder delivers is its cashback, not a
	// second one of order-1, in a trace of its own.
	second := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"order-2"}`))
	_, err = c.billing(inboxtest.Routed("billing", second))
	require.NoError(t, err)
	next := c.forward(t)
	require.Equal(t, outbox.MessageID("billing", second.UUID, "CashbackCredited"), next.UUID)
	require.NotContains(t, next.Metadata.Get("traceparent"), traceID.String())
	count := 0
	for _, s := range c.spans.GetSpans() {
		if s.SpanContext.TraceID() == traceID && s.Name == "outbox send cashback" {
			count++
		}
	}
	require.Equal(t, 1, count, "one outbox span in the order's trace: the duplicate emitted nothing")
}

// A message that carries no trace starts one in A, which the outbox, the Forwarder and
// B continue.
func TestTraceStartsAtAMessageWithoutOne(t *testing.T) {
	t.Parallel()
	c := newTraced(t, true)
	_, err := c.billing(inboxtest.Routed("billing", message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
	require.NoError(t, err)
	c.forward(t)
	var a tracetest.SpanStub
	for _, s := range c.spans.GetSpans() {
		if s.Name == "process billing" {
			a = s
		}
	}
	require.True(t, a.SpanContext.IsValid())
	require.False(t, a.Parent.IsValid(), "A's span is a root")
	traceID := a.SpanContext.TraceID()
	send := c.span(t, "outbox send cashback", traceID)
	require.Equal(t, a.SpanContext.SpanID(), send.Parent.SpanID())
	require.Equal(t, send.SpanContext.SpanID(), c.span(t, "process receipts", traceID).Parent.SpanID())
	c.span(t, "process "+c.ob.Config().ForwarderTopic, traceID)
}

// Without a span in the handler's context the outbox behaves as before: it starts no
// span and writes no trace context into the message.
func TestOutboxWithoutATraceWritesNone(t *testing.T) {
	t.Parallel()
	c := newTraced(t, false) // A without Tracing: no span in its context
	_, err := c.billing(inboxtest.Routed("billing", message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
	require.NoError(t, err)
	got := c.forward(t)
	require.NotContains(t, got.Metadata, "traceparent")
	require.NotContains(t, got.Metadata, "tracestate")
	for _, s := range c.spans.GetSpans() {
		require.NotEqual(t, "outbox send cashback", s.Name, "no outbox span without a trace")
		require.NotEqual(t, "process billing", s.Name)
	}
	// B (behind Tracing) starts its own trace; the Forwarder's span is a root too.
	b := c.span(t, "process receipts", spanNamed(t, c, "process receipts").SpanContext.TraceID())
	require.False(t, b.Parent.IsValid())
}

func spanNamed(t *testing.T, c traced, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range c.spans.GetSpans() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no span named %q", name)
	return tracetest.SpanStub{}
}
