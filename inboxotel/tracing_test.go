package inboxotel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/watermill-inbox/inbox/inboxotel"
)

// Tracing's parent: the traceparent in the metadata, else the span in the message's
// context (a malformed traceparent is ignored), else none; a handler's error marks the
// span, its text only with RecordErrors.
func TestTracingMiddleware(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("test")
	remoteCtx, remote := tracer.Start(context.Background(), "producer")
	remote.End()
	localCtx, local := tracer.Start(context.Background(), "broker receive")
	local.End()

	for _, tc := range []struct {
		name        string
		ctx         context.Context
		traceparent func(*message.Message)
		err         error
		record      bool
		wantParent  trace.SpanID
		wantStatus  codes.Code
		wantDesc    string
	}{
		{"metadata", context.Background(), inject(remoteCtx), nil, false, remote.SpanContext().SpanID(), codes.Unset, ""},
		{"metadata over the context's span", localCtx, inject(remoteCtx), nil, false, remote.SpanContext().SpanID(), codes.Unset, ""},
		{"the context's span", localCtx, func(*message.Message) {}, nil, false, local.SpanContext().SpanID(), codes.Unset, ""},
		{"malformed traceparent", localCtx, func(m *message.Message) { m.Metadata.Set("traceparent", "00-zz-<script>-01") }, nil, false, local.SpanContext().SpanID(), codes.Unset, ""},
		{"none: a root", context.Background(), func(*message.Message) {}, nil, false, trace.SpanID{}, codes.Unset, ""},
		{"failed", context.Background(), func(*message.Message) {}, errors.New("card declined for alice"), false, trace.SpanID{}, codes.Error, "handler failed"},
		{"failed, recorded", context.Background(), func(*message.Message) {}, errors.New("card declined for alice"), true, trace.SpanID{}, codes.Error, "card declined for alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans.Reset()
			tr := inboxotel.NewTracing(inboxotel.TracingConfig{TracerProvider: tp, RecordErrors: tc.record})
			msg := message.NewMessage("m-1", nil)
			msg.SetContext(tc.ctx)
			tc.traceparent(msg)
			var inHandler trace.SpanContext
			_, err := tr.Middleware(func(m *message.Message) ([]*message.Message, error) {
				inHandler = trace.SpanContextFromContext(m.Context())
				return nil, tc.err
			})(msg)
			require.Equal(t, tc.err, err)
			got := spans.GetSpans()
			require.Len(t, got, 1)
			require.Equal(t, trace.SpanKindConsumer, got[0].SpanKind)
			require.Equal(t, got[0].SpanContext.SpanID(), inHandler.SpanID(), "the handler runs in the span")
			require.Equal(t, tc.wantParent, got[0].Parent.SpanID())
			require.Equal(t, tc.wantStatus, got[0].Status.Code)
			require.Equal(t, tc.wantDesc, got[0].Status.Description)
		})
	}
}

func inject(ctx context.Context) func(*message.Message) {
	return func(m *message.Message) { propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(m.Metadata)) }
}
