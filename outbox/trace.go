package outbox

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Trace context through the outbox (ADR 149): a message emitted from a handler whose
// context carries a span gets that trace in its metadata, as W3C traceparent (and
// tracestate), under a span of the outbox's own ("outbox send <topic>", a producer
// span, child of the handler's); so do the Forwarder's envelopes, so that a tracing
// middleware on the Forwarder continues the trace too. A consumer downstream continues
// it with inboxotel.Tracing (or any middleware that extracts the traceparent from the
// metadata). A context without a span changes nothing: no span, no metadata.

// ScopeName is the instrumentation scope of the outbox's spans: this package's import
// path.
const ScopeName = "github.com/watermill-inbox/inbox/outbox"

// startSpan starts the outbox's span for msgs, a child of the span in ctx, and returns
// the context that carries it and the func that ends it with the publish's error. When
// ctx carries no valid span context it starts nothing and returns ctx.
func (o *Outbox) startSpan(ctx context.Context, topic string, msgs []*message.Message) (context.Context, func(error)) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, func(error) {}
	}
	attrs := []attribute.KeyValue{semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(topic)}
	if len(msgs) > 1 {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(msgs)))
	}
	ctx, span := o.cfg.TracerProvider.Tracer(ScopeName).Start(ctx, "outbox send "+topic,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, "outbox: writing the messages failed")
		}
		span.End()
	}
}

// inject writes the trace context of ctx into m's metadata with the configured
// propagator, replacing what the metadata held under the same names, when ctx carries
// a valid span context; otherwise it changes nothing.
func (o *Outbox) inject(ctx context.Context, m *message.Message) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if m.Metadata == nil {
		m.Metadata = message.Metadata{}
	}
	o.cfg.Propagator.Inject(ctx, propagation.MapCarrier(m.Metadata))
}
