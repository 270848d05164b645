package inboxotel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxotel"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// bundle is the real OTel SDK with in-memory readers, and an inboxotel.Observer on it.
type bundle struct {
	spans  *tracetest.SpanRecorder
	tracer trace.Tracer
	reader *sdkmetric.ManualReader
	obs    *inboxotel.Observer
}

func setup(t *testing.T, cfg inboxotel.Config) bundle {
	t.Helper()
	b := bundle{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	b.tracer = tp.Tracer("inboxotel_test")
	cfg.MeterProvider = mp
	obs, err := inboxotel.New(cfg)
	require.NoError(t, err)
	b.obs = obs
	return b
}

// metrics collects the Observer's scope.
func (b bundle) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, b.reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	require.Equal(t, inboxotel.ScopeName, rm.ScopeMetrics[0].Scope.Name)
	byName := map[string]metricdata.Metrics{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		byName[m.Name] = m
	}
	return byName
}

// tracing is an outer middleware that runs each delivery in a span of its own, as an
// application's tracing middleware would.
func (b bundle) tracing(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx, span := b.tracer.Start(msg.Context(), "handle")
		defer span.End()
		orig := msg.Context()
		msg.SetContext(ctx)
		defer msg.SetContext(orig)
		return h(msg)
	}
}

func series(consumer string, outcome inbox.Outcome) attribute.Set {
	return attribute.NewSet(inboxotel.AttrConsumer.String(consumer), inboxotel.AttrOutcome.String(string(outcome)))
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// everything returns what the inbox can have put on a span: attributes, events, status
// (the name is the test's own).
func everything(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	b.WriteString(s.Status().Description)
	for _, kv := range s.Attributes() {
		b.WriteString("|" + kv.Value.String())
	}
	for _, e := range s.Events() {
		b.WriteString("|" + e.Name)
		for _, kv := range e.Attributes {
			b.WriteString("|" + kv.Value.String())
		}
	}
	return b.String()
}

// A real Watermill router, the real PostgreSQL store, the real SDK: a first delivery, a
// redelivery, a reused key with another payload, and a handler that fails once.
func TestObserver_ThroughARouter(t *testing.T) {
	t.Parallel()
	b := setup(t, inboxotel.Config{})
	pool := brokertest.PgPool(t)
	ib, err := inbox.New(inbox.Config{Store: brokertest.Store(t, pool, brokertest.Name("inboxotel"), true), Observer: b.obs})
	require.NoError(t, err)

	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(b.tracing, ib.Middleware)
	var mu sync.Mutex
	failed := map[string]bool{}
	handled := make(chan struct{}, 16)
	router.AddConsumerHandler("billing", "orders", pubSub, func(msg *message.Message) error {
		defer func() { handled <- struct{}{} }()
		mu.Lock()
		defer mu.Unlock()
		if string(msg.Payload) == "flaky" && !failed[msg.UUID] {
			failed[msg.UUID] = true
			return errors.New("provider timed out")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	t.Cleanup(func() { _ = router.Close() })

	// Keys (and UUIDs) that must not reach any span.
	orderA, orderB := "order-a-"+watermill.NewUUID(), "order-b-"+watermill.NewUUID()
	for _, m := range []*message.Message{
		message.NewMessage(orderA, []byte("x")),
		message.NewMessage(orderA, []byte("x")),
		message.NewMessage(orderA, []byte("other")),
		message.NewMessage(orderB, []byte("flaky")), // nacked, redelivered by the GoChannel
	} {
		require.NoError(t, pubSub.Publish("orders", m))
	}
	require.Eventually(t, func() bool { return len(b.spans.Ended()) == 5 }, 10*time.Second, 10*time.Millisecond)

	want := []struct {
		outcome inbox.Outcome
		status  codes.Code
	}{
		{inbox.OutcomeProcessed, codes.Unset},
		{inbox.OutcomeDuplicate, codes.Unset},
		{inbox.OutcomeMismatch, codes.Unset},
		{inbox.OutcomeFailed, codes.Error},
		{inbox.OutcomeProcessed, codes.Unset},
	}
	spans := b.spans.Ended()
	require.Len(t, spans, len(want))
	for i, s := range spans {
		w := want[i]
		a := attrs(s)
		require.Equal(t, "billing", a[inboxotel.AttrConsumer].AsString(), "span %d", i)
		require.Equal(t, string(w.outcome), a[inboxotel.AttrOutcome].AsString(), "span %d", i)
		require.Positive(t, a[inboxotel.AttrClaimWait].AsFloat64(), "span %d: the claim wait, in seconds", i)
		require.Equal(t, w.status, s.Status().Code, "span %d: %s", i, w.outcome)
		require.NotContains(t, a, inboxotel.AttrKey, "the key is opt-in")
		require.NotContains(t, a, attribute.Key("messaging.message.id"), "the UUID is opt-in")
		require.Len(t, s.Events(), 1, "span %d: one event per pass", i)
		require.Equal(t, inboxotel.EventName, s.Events()[0].Name)
		if w.status == codes.Error {
			require.Equal(t, string(inbox.OutcomeFailed), a[attribute.Key("error.type")].AsString())
			require.Equal(t, "inbox: failed", s.Status().Description, "the error text is opt-in")
		} else {
			require.NotContains(t, a, attribute.Key("error.type"))
		}
		for _, id := range []string{orderA, orderB} {
			require.NotContains(t, everything(s), id, "span %d carries a key", i)
		}
	}

	got := b.metrics(t)
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        inboxotel.MessagesMetric,
		Description: "Deliveries handled by the inbox, per consumer and outcome (a message delivered twice counts twice).",
		Unit:        "{message}",
		Data: metricdata.Sum[int64]{
			Temporality: metricdata.CumulativeTemporality,
			IsMonotonic: true,
			DataPoints: []metricdata.DataPoint[int64]{
				{Attributes: series("billing", inbox.OutcomeProcessed), Value: 2},
				{Attributes: series("billing", inbox.OutcomeDuplicate), Value: 1},
				{Attributes: series("billing", inbox.OutcomeMismatch), Value: 1},
				{Attributes: series("billing", inbox.OutcomeFailed), Value: 1},
			},
		},
	}, got[inboxotel.MessagesMetric], metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars())

	claim := got[inboxotel.ClaimDurationMetric]
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        inboxotel.ClaimDurationMetric,
		Description: "Time spent claiming a message's inbox key, waits on a concurrent duplicate included.",
		Unit:        "s",
		Data: metricdata.Histogram[float64]{
			Temporality: metricdata.CumulativeTemporality,
			DataPoints: []metricdata.HistogramDataPoint[float64]{
				{Attributes: series("billing", inbox.OutcomeProcessed)},
				{Attributes: series("billing", inbox.OutcomeDuplicate)},
				{Attributes: series("billing", inbox.OutcomeMismatch)},
				{Attributes: series("billing", inbox.OutcomeFailed)},
			},
		},
	}, claim, metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreValue(), metricdatatest.IgnoreExemplars())
	counts := map[string]uint64{}
	for _, dp := range claim.Data.(metricdata.Histogram[float64]).DataPoints {
		outcome, _ := dp.Attributes.Value(inboxotel.AttrOutcome)
		counts[outcome.AsString()] = dp.Count
		require.Equal(t, inboxotel.ClaimDurationBuckets, dp.Bounds)
		require.Positive(t, dp.Sum)
	}
	require.Equal(t, map[string]uint64{"processed": 2, "duplicate": 1, "mismatch": 1, "failed": 1}, counts)

	// The message context went to the instruments: the SDK's trace-based exemplars link
	// each count to the span of the delivery it counts.
	traces := map[string]bool{}
	for _, s := range spans {
		traces[s.SpanContext().TraceID().String()] = true
	}
	for _, dp := range got[inboxotel.MessagesMetric].Data.(metricdata.Sum[int64]).DataPoints {
		require.NotEmpty(t, dp.Exemplars, "%v", dp.Attributes)
		for _, e := range dp.Exemplars {
			require.True(t, traces[trace.TraceID(e.TraceID).String()], "exemplar of a delivery's trace")
		}
	}
}

func TestObserver_OptIns(t *testing.T) {
	t.Parallel()
	b := setup(t, inboxotel.Config{RecordKey: true, RecordMessageID: true, RecordErrors: true})
	ib, err := inbox.New(inbox.Config{
		Store:    brokertest.Store(t, brokertest.PgPool(t), brokertest.Name("inboxotel"), true),
		Consumer: "billing",
		Key:      inbox.KeyFromMetadata("order_id"),
		Observer: b.obs,
	})
	require.NoError(t, err)
	boom := errors.New("provider timed out")
	h := b.tracing(ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, boom }))
	msg := message.NewMessage("uuid-1", nil)
	msg.Metadata.Set("order_id", "order-1")
	_, err = h(msg)
	require.ErrorIs(t, err, boom)

	spans := b.spans.Ended()
	require.Len(t, spans, 1)
	a := attrs(spans[0])
	require.Equal(t, "order-1", a[inboxotel.AttrKey].AsString())
	require.Equal(t, "uuid-1", a[attribute.Key("messaging.message.id")].AsString())
	require.Equal(t, codes.Error, spans[0].Status().Code)
	require.Equal(t, boom.Error(), spans[0].Status().Description)
	var exception []attribute.KeyValue
	for _, e := range spans[0].Events() {
		if e.Name == "exception" {
			exception = e.Attributes
		}
	}
	require.Contains(t, exception, attribute.String("exception.message", boom.Error()))
}

// Inbox.Process: the span of the ctx passed to it; no message, so no UUID even when opted in.
func TestObserver_Process(t *testing.T) {
	t.Parallel()
	b := setup(t, inboxotel.Config{RecordMessageID: true})
	ib, err := inbox.New(inbox.Config{Store: brokertest.Store(t, brokertest.PgPool(t), brokertest.Name("inboxotel"), true), Observer: b.obs})
	require.NoError(t, err)
	for _, want := range []inbox.Outcome{inbox.OutcomeProcessed, inbox.OutcomeDuplicate} {
		ctx, span := b.tracer.Start(context.Background(), "webhook")
		dup, err := ib.Process(ctx, "webhooks", "delivery-1", func(context.Context) error { return nil })
		span.End()
		require.NoError(t, err)
		require.Equal(t, want == inbox.OutcomeDuplicate, dup)
	}
	// Without a span in the context the metrics are still recorded.
	_, err = ib.Process(context.Background(), "webhooks", "delivery-1", func(context.Context) error { return nil })
	require.NoError(t, err)

	spans := b.spans.Ended()
	require.Len(t, spans, 2)
	for i, want := range []inbox.Outcome{inbox.OutcomeProcessed, inbox.OutcomeDuplicate} {
		a := attrs(spans[i])
		require.Equal(t, "webhooks", a[inboxotel.AttrConsumer].AsString())
		require.Equal(t, string(want), a[inboxotel.AttrOutcome].AsString())
		require.Positive(t, a[inboxotel.AttrClaimWait].AsFloat64())
		require.NotContains(t, a, attribute.Key("messaging.message.id"))
		require.Equal(t, codes.Unset, spans[i].Status().Code)
	}
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        inboxotel.MessagesMetric,
		Description: "Deliveries handled by the inbox, per consumer and outcome (a message delivered twice counts twice).",
		Unit:        "{message}",
		Data: metricdata.Sum[int64]{
			Temporality: metricdata.CumulativeTemporality,
			IsMonotonic: true,
			DataPoints: []metricdata.DataPoint[int64]{
				{Attributes: series("webhooks", inbox.OutcomeProcessed), Value: 1},
				{Attributes: series("webhooks", inbox.OutcomeDuplicate), Value: 2},
			},
		},
	}, b.metrics(t)[inboxotel.MessagesMetric], metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars())
}

// A failure without a claim (no key) is an error on the span, with no claim wait and no
// claim-duration sample.
func TestObserver_NoKey(t *testing.T) {
	t.Parallel()
	b := setup(t, inboxotel.Config{})
	ib, err := inbox.New(inbox.Config{
		Store:    brokertest.Store(t, brokertest.PgPool(t), brokertest.Name("inboxotel"), true),
		Consumer: "billing",
		Key:      inbox.KeyFromMetadata("order_id"),
		Observer: b.obs,
	})
	require.NoError(t, err)
	_, err = b.tracing(ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil }))(message.NewMessage("uuid-1", nil))
	require.ErrorIs(t, err, inbox.ErrNoKey)

	spans := b.spans.Ended()
	require.Len(t, spans, 1)
	a := attrs(spans[0])
	require.Equal(t, string(inbox.OutcomeNoKey), a[inboxotel.AttrOutcome].AsString())
	require.Equal(t, string(inbox.OutcomeNoKey), a[attribute.Key("error.type")].AsString())
	require.NotContains(t, a, inboxotel.AttrClaimWait)
	require.Equal(t, codes.Error, spans[0].Status().Code)
	got := b.metrics(t)
	require.NotContains(t, got, inboxotel.ClaimDurationMetric, "no claim, no sample")
	require.Equal(t, int64(1), got[inboxotel.MessagesMetric].Data.(metricdata.Sum[int64]).DataPoints[0].Value)
}

// A tracing middleware outside Retry: one span for every attempt, one event per attempt,
// the last outcome in the attributes. (The failed attempt's codes.Error stays: an OTel
// status cannot go back to Unset, which is why the docs put tracing inside Retry.)
func TestObserver_RetriesInOneSpan(t *testing.T) {
	t.Parallel()
	b := setup(t, inboxotel.Config{})
	ib, err := inbox.New(inbox.Config{
		Store:    brokertest.Store(t, brokertest.PgPool(t), brokertest.Name("inboxotel"), true),
		Consumer: "billing",
		Observer: b.obs,
	})
	require.NoError(t, err)
	calls := 0
	h := b.tracing(middleware.Retry{MaxRetries: 2}.Middleware(ib.Middleware(func(*message.Message) ([]*message.Message, error) {
		if calls++; calls == 1 {
			return nil, errors.New("provider timed out")
		}
		return nil, nil
	})))
	msg := message.NewMessage("order-1", nil)
	_, err = h(msg)
	require.NoError(t, err)
	require.Equal(t, string(inbox.OutcomeProcessed), msg.Metadata.Get(inbox.MetadataOutcome), "the retry cleared the failed attempt's outcome")

	spans := b.spans.Ended()
	require.Len(t, spans, 1)
	var outcomes []string
	for _, e := range spans[0].Events() {
		require.Equal(t, inboxotel.EventName, e.Name)
		for _, kv := range e.Attributes {
			if kv.Key == inboxotel.AttrOutcome {
				outcomes = append(outcomes, kv.Value.AsString())
			}
		}
	}
	require.Equal(t, []string{"failed", "processed"}, outcomes)
	require.Equal(t, "processed", attrs(spans[0])[inboxotel.AttrOutcome].AsString())
}
