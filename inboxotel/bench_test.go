package inboxotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxotel"
	"github.com/watermill-inbox/inbox/inboxprom"
	"github.com/watermill-inbox/inbox/internal/benchload"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// sdkObserver returns an Observer on the real SDK (a manual reader, spans sampled and
// recording but exported nowhere) and a tracer of the same SDK.
func sdkObserver(b *testing.B) (*inboxotel.Observer, trace.Tracer) {
	b.Helper()
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	obs, err := inboxotel.New(inboxotel.Config{MeterProvider: mp})
	require.NoError(b, err)
	return obs, tp.Tracer("bench")
}

// BenchmarkObserve: one observation, alone (ns/op and allocs/op), against inboxprom's.
func BenchmarkObserve(b *testing.B) {
	o := inbox.Observation{Consumer: "billing", Key: "order-1", MessageUUID: "order-1", Outcome: inbox.OutcomeProcessed, ClaimWait: time.Millisecond}
	b.Run("inboxprom", func(b *testing.B) {
		obs, err := inboxprom.New(prometheus.NewRegistry())
		require.NoError(b, err)
		b.ReportAllocs()
		for b.Loop() {
			obs.Observe(context.Background(), o)
		}
	})
	b.Run("inboxotel/no-span", func(b *testing.B) {
		obs, _ := sdkObserver(b)
		b.ReportAllocs()
		for b.Loop() {
			obs.Observe(context.Background(), o)
		}
	})
	b.Run("inboxotel/span", func(b *testing.B) {
		obs, tracer := sdkObserver(b)
		ctx, span := tracer.Start(context.Background(), "handle")
		defer span.End()
		b.ReportAllocs()
		for b.Loop() {
			obs.Observe(ctx, o)
		}
	})
}

// BenchmarkInboxWithOTel: Inbox.Process on PostgreSQL with an empty handler (the inbox's
// own work only, the worst case for the observer's share), each op in a recording span,
// without an observer (A) and with inboxotel (B), paired op by op (benchload.Paired). The
// ratio is B's rate over A's.
func BenchmarkInboxWithOTel(b *testing.B) {
	pool := brokertest.PgPool(b)
	store := brokertest.Store(b, pool, brokertest.Name("otelbench"), true)
	obs, tracer := sdkObserver(b)
	plain, err := inbox.New(inbox.Config{Store: store})
	require.NoError(b, err)
	observed, err := inbox.New(inbox.Config{Store: store, Observer: obs})
	require.NoError(b, err)
	op := func(ib *inbox.Inbox) benchload.Op {
		return func(ctx context.Context, key string) error {
			ctx, span := tracer.Start(ctx, "handle")
			defer span.End()
			_, err := ib.Process(ctx, "billing", key, func(context.Context) error { return nil })
			return err
		}
	}
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			ab, err := benchload.Paired(context.Background(), workers, b.N, 0, op(plain), op(observed))
			require.NoError(b, err)
			b.ReportMetric(ab.A.Rate(), "plain/s")
			b.ReportMetric(ab.B.Rate(), "otel/s")
			b.ReportMetric(ab.Ratio(), "ratio")
		})
	}
}
