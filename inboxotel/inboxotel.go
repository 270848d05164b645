package inboxotel

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/oneline"
)

// ScopeName is the instrumentation scope of the Observer's meter: this package's import
// path.
const ScopeName = "github.com/watermill-inbox/inbox/inboxotel"

// The instruments an Observer records to.
const (
	// MessagesMetric counts deliveries per consumer and outcome (unit {message}): each
	// pass of a message through the inbox counts once (a retry, a redelivery, a
	// duplicate), so it counts deliveries, not distinct messages; TableGauges'
	// TableKeysMetric counts the messages the table keeps.
	MessagesMetric = "inbox.messages"
	// ClaimDurationMetric is the histogram of claim times, in seconds, per consumer and
	// outcome.
	ClaimDurationMetric = "inbox.claim.duration"
)

// EventName names the span event added for each message the inbox handles.
const EventName = "inbox.handled"

// The attributes an Observer sets. No messaging semantic convention fits the inbox's
// consumer: messaging.consumer.group.name is the broker's consumer group, which a broker
// instrumentation may have set on the same span, and the inbox's consumer (by default the
// Watermill handler name) is another thing. The opt-in message UUID is
// messaging.message.id, and a failure's class is error.type, both from the conventions.
const (
	// AttrConsumer is the consumer the key belongs to (metrics and span).
	AttrConsumer = attribute.Key("inbox.consumer")
	// AttrOutcome is the inbox.Outcome (metrics and span).
	AttrOutcome = attribute.Key("inbox.outcome")
	// AttrClaimWait is the claim's time in seconds, a float64 (span and event).
	AttrClaimWait = attribute.Key("inbox.claim.wait")
	// AttrKey is the stored key (span only, with Config.RecordKey).
	AttrKey = attribute.Key("inbox.key")
	// AttrTenant is the message's tenant (metrics and span, with Config.RecordTenant).
	AttrTenant = attribute.Key("inbox.tenant")
)

// ClaimDurationBuckets are the claim-duration histogram's bucket boundaries, in seconds:
// 0.5 ms to about 16 s, doubling, as inboxprom's.
var ClaimDurationBuckets = []float64{
	0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064,
	0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384,
}

// Config configures an Observer. The zero value records to the global MeterProvider and
// puts nothing personal on spans.
type Config struct {
	// MeterProvider provides the meter (scope ScopeName) of the Observer's instruments.
	// Defaults to otel.GetMeterProvider(), the global one, whose instruments forward to
	// the provider set later with otel.SetMeterProvider.
	MeterProvider metric.MeterProvider

	// RecordKey sets AttrKey, the key as stored, on the span. Keys can carry personal
	// data. A key names a message only in its tenant, so the span of a message that has
	// one gets AttrTenant with it, RecordTenant or not (the span only: no metric series
	// is added). Defaults to false.
	RecordKey bool

	// RecordMessageID sets messaging.message.id, the Watermill message UUID, on the span
	// (never for Inbox.Process, which has no message). Under the default
	// inbox.KeyFromUUID the UUID is the key. It replaces a messaging.message.id that a
	// broker instrumentation set on the same span. Defaults to false.
	RecordMessageID bool

	// RecordTenant sets AttrTenant, inbox.Observation.Tenant, on the metrics and the
	// span of a message that has a tenant (an inbox on an inbox.TenantStore). Each tenant
	// multiplies the metric series, so it is off unless asked for. Defaults to false.
	RecordTenant bool

	// RecordErrors records a failure's error on the span (span.RecordError, an
	// "exception" event) and makes it the status description. The inbox's errors name
	// the consumer and the key, and a handler's error may carry anything. Without it the
	// status description is the outcome. Defaults to false.
	RecordErrors bool
}

// Observer is an inbox.Observer that records to OpenTelemetry instruments and annotates
// the span in the message's context, and an inbox.RetentionObserver that records the
// purges of an inbox.Retention (PurgeRunsMetric...). It is safe for concurrent use; one Observer can serve
// every inbox of a process, the consumer being an attribute.
type Observer struct {
	cfg       Config
	messages  metric.Int64Counter
	claimWait metric.Float64Histogram
	sets      sync.Map // seriesKey -> attribute.Set
	retention retentionInstruments
}

var _ inbox.Observer = (*Observer)(nil)

// seriesKey identifies one (consumer, outcome, tenant) attribute set; tenant is empty
// without Config.RecordTenant.
type seriesKey struct {
	consumer string
	outcome  inbox.Outcome
	tenant   string
}

// New returns an Observer whose instruments come from cfg.MeterProvider. It fails when
// the provider cannot create them.
func New(cfg Config) (*Observer, error) {
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	meter := cfg.MeterProvider.Meter(ScopeName)
	messages, errMessages := meter.Int64Counter(MessagesMetric,
		metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries handled by the inbox, per consumer and outcome (a message delivered twice counts twice)."))
	claimWait, errClaim := meter.Float64Histogram(ClaimDurationMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Time spent claiming a message's inbox key, waits on a concurrent duplicate included."),
		metric.WithExplicitBucketBoundaries(ClaimDurationBuckets...))
	if err := oneline.Join(errMessages, errClaim); err != nil {
		return nil, fmt.Errorf("inboxotel: creating the instruments with the MeterProvider: %w", err)
	}
	retention, err := newRetentionInstruments(meter)
	if err != nil {
		return nil, err
	}
	return &Observer{cfg: cfg, messages: messages, claimWait: claimWait, retention: retention}, nil
}

// Observe implements inbox.Observer: it counts o, records its claim time when a claim was
// tried, and annotates the span in ctx if it is recording.
func (ob *Observer) Observe(ctx context.Context, o inbox.Observation) {
	tenant := ""
	if ob.cfg.RecordTenant {
		tenant = o.Tenant
	}
	series := metric.WithAttributeSet(ob.attributes(o.Consumer, o.Outcome, tenant))
	ob.messages.Add(ctx, 1, series)
	if o.ClaimWait > 0 {
		ob.claimWait.Record(ctx, o.ClaimWait.Seconds(), series)
	}

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	outcome := AttrOutcome.String(string(o.Outcome))
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, AttrConsumer.String(o.Consumer), outcome)
	event := []attribute.KeyValue{outcome}
	if o.ClaimWait > 0 {
		wait := AttrClaimWait.Float64(o.ClaimWait.Seconds())
		attrs, event = append(attrs, wait), append(event, wait)
	}
	recordKey := ob.cfg.RecordKey && o.Key != ""
	if recordKey && o.Tenant != "" { // the key's tenant: the same key in two tenants is two messages
		tenant = o.Tenant
	}
	if tenant != "" {
		attrs = append(attrs, AttrTenant.String(tenant))
	}
	if recordKey {
		attrs = append(attrs, AttrKey.String(o.Key))
	}
	if ob.cfg.RecordMessageID && o.MessageUUID != "" {
		attrs = append(attrs, semconv.MessagingMessageID(o.MessageUUID))
	}
	if o.Err != nil {
		attrs = append(attrs, semconv.ErrorTypeKey.String(string(o.Outcome)))
	}
	span.SetAttributes(attrs...)
	span.AddEvent(EventName, trace.WithAttributes(event...))
	if o.Err == nil {
		return
	}
	if ob.cfg.RecordErrors {
		span.RecordError(o.Err)
		span.SetStatus(codes.Error, o.Err.Error())
		return
	}
	span.SetStatus(codes.Error, "inbox: "+string(o.Outcome))
}

// attributes returns the metric attribute set of one series, built once.
func (ob *Observer) attributes(consumer string, outcome inbox.Outcome, tenant string) attribute.Set {
	key := seriesKey{consumer, outcome, tenant}
	if set, ok := ob.sets.Load(key); ok {
		return set.(attribute.Set)
	}
	set := attribute.NewSet(AttrConsumer.String(consumer), AttrOutcome.String(string(outcome)))
	if tenant != "" {
		set = attribute.NewSet(AttrConsumer.String(consumer), AttrOutcome.String(string(outcome)), AttrTenant.String(tenant))
	}
	ob.sets.Store(key, set)
	return set
}
