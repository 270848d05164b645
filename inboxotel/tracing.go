package inboxotel

import (
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracingConfig configures a Tracing middleware.
type TracingConfig struct {
	// TracerProvider provides the tracer (scope ScopeName) of the consumer spans.
	// Defaults to otel.GetTracerProvider(), the global one.
	TracerProvider trace.TracerProvider

	// Propagator reads the trace context from the message's metadata. Set
	// otel.GetTextMapPropagator() to use the process's. Defaults to
	// propagation.TraceContext{}: W3C traceparent and tracestate, as package outbox
	// writes them.
	Propagator propagation.TextMapPropagator

	// RecordErrors records a handler's error on the span (span.RecordError) and makes
	// it the status description; the inbox's errors name the consumer and the key.
	// Without it the status description is "handler failed". Defaults to false.
	RecordErrors bool
}

// Tracing is a Watermill middleware that continues, in a consumer, the trace a message
// carries in its metadata (W3C traceparent, as package outbox writes it for the
// messages a handler emits): it starts a consumer span, "process <topic>", whose parent
// is the trace context of the metadata, or, without one, the span already in the
// message's context (a new trace when there is none), and puts it in the message's
// context for the handler and the inbox's Observer to annotate. Put it outside the
// inbox middleware:
//
//	tr := inboxotel.NewTracing(inboxotel.TracingConfig{})
//	router.AddMiddleware(tr.Middleware, ib.Middleware)
//
// A message emitted through the outbox from that handler then carries the span's
// trace, and the next consumer's Tracing continues it: one trace spans the consumer,
// the outbox, the Forwarder (with Tracing in forwarder.Config.Middlewares) and the
// next consumer.
type Tracing struct {
	cfg    TracingConfig
	tracer trace.Tracer
}

// NewTracing returns a Tracing middleware with cfg's defaults applied.
func NewTracing(cfg TracingConfig) *Tracing {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	return &Tracing{cfg: cfg, tracer: cfg.TracerProvider.Tracer(ScopeName)}
}

// Middleware implements message.HandlerMiddleware.
func (tr *Tracing) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		topic := message.SubscribeTopicFromCtx(ctx)
		name := "process " + topic
		if topic == "" {
			name = strings.TrimSpace("process " + message.HandlerNameFromCtx(ctx))
		}
		attrs := []attribute.KeyValue{semconv.MessagingOperationTypeProcess}
		if topic != "" {
			attrs = append(attrs, semconv.MessagingDestinationName(topic))
		}
		ctx = tr.cfg.Propagator.Extract(ctx, propagation.MapCarrier(msg.Metadata))
		ctx, span := tr.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
		defer span.End()
		msg.SetContext(ctx)
		out, err := h(msg)
		if err != nil {
			if tr.cfg.RecordErrors {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			} else {
				span.SetStatus(codes.Error, "handler failed")
			}
		}
		return out, err
	}
}
