package inboxotel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxotel"
)

// The observer in a router: metrics to the global MeterProvider, and the inbox's outcome
// on the span of a tracing middleware that runs outside the inbox (inside Retry, so each
// attempt gets a span of its own).
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{})
	if err != nil {
		log.Fatal(err)
	}
	obs, err := inboxotel.New(inboxotel.Config{}) // otel.GetMeterProvider()
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Store: store, Observer: obs})
	if err != nil {
		log.Fatal(err)
	}

	tracing := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx, span := otel.Tracer("billing").Start(msg.Context(), "orders process")
			defer span.End()
			msg.SetContext(ctx)
			return h(msg)
		}
	}
	logger := watermill.NewStdLogger(false, false)
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(middleware.Retry{MaxRetries: 3}.Middleware, tracing, ib.Middleware)
	router.AddConsumerHandler("billing", "orders", pubSub, func(msg *message.Message) error { return nil })
	if err := router.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// What one observation records, read back through the SDK's in-memory reader and span
// recorder.
func ExampleObserver_Observe() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	obs, err := inboxotel.New(inboxotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		log.Fatal(err)
	}
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("example").Start(context.Background(), "orders process")

	// What the inbox middleware reports for a redelivery it skipped.
	obs.Observe(ctx, inbox.Observation{
		Consumer:    "billing",
		Key:         "order-1",
		MessageUUID: "order-1",
		Outcome:     inbox.OutcomeDuplicate,
		ClaimWait:   3 * time.Millisecond,
	})
	span.End()

	for _, kv := range spans.Ended()[0].Attributes() {
		fmt.Printf("span %s=%s\n", kv.Key, kv.Value.String())
	}
	fmt.Println("span status:", spans.Ended()[0].Status().Code)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			consumer, _ := data.DataPoints[0].Attributes.Value(inboxotel.AttrConsumer)
			outcome, _ := data.DataPoints[0].Attributes.Value(inboxotel.AttrOutcome)
			fmt.Printf("%s{consumer=%s,outcome=%s} %d\n", m.Name, consumer.String(), outcome.String(), data.DataPoints[0].Value)
		case metricdata.Histogram[float64]:
			fmt.Printf("%s: %d sample of %gs\n", m.Name, data.DataPoints[0].Count, data.DataPoints[0].Sum)
		}
	}
	// Output:
	// span inbox.consumer=billing
	// span inbox.outcome=duplicate
	// span inbox.claim.wait=0.003
	// span status: Unset
	// inbox.messages{consumer=billing,outcome=duplicate} 1
	// inbox.claim.duration: 1 sample of 0.003s
}
