package inboxotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxotel"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// A Retention on the real PostgreSQL store, observed with the real SDK: a skipped run
// (the turn held elsewhere), then a run that purges seven keys.
func TestObserver_Retention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := brokertest.Store(t, brokertest.PgPool(t), brokertest.Name("inboxotel"), true)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.NoError(t, err)
	for _, key := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		_, err := ib.Process(ctx, "billing", key, func(context.Context) error { return nil })
		require.NoError(t, err)
	}
	b := setup(t, inboxotel.Config{})
	r, err := inbox.NewRetention(inbox.RetentionConfig{Store: store, Name: "orders", Observer: b.obs,
		Purge: inbox.PurgeConfig{OlderThan: time.Nanosecond, Force: true, BatchSize: 5}})
	require.NoError(t, err)
	held, err := store.TakePurgeTurn(ctx, time.Second)
	require.NoError(t, err)
	require.NotNil(t, held)
	_, err = r.Purge(ctx)
	require.NoError(t, err)
	require.NoError(t, held.Release(ctx))
	before := time.Now()
	_, err = r.Purge(ctx)
	require.NoError(t, err)

	m := b.metrics(t)
	orders := inboxotel.AttrRetention.String("orders")
	sums := func(name string) map[attribute.Set]int64 {
		out := map[attribute.Set]int64{}
		for _, dp := range m[name].Data.(metricdata.Sum[int64]).DataPoints {
			out[dp.Attributes] = dp.Value
		}
		return out
	}
	require.Equal(t, map[attribute.Set]int64{
		attribute.NewSet(orders, inboxotel.AttrPurgeResult.String("skipped")): 1,
		attribute.NewSet(orders, inboxotel.AttrPurgeResult.String("purged")):  1,
	}, sums(inboxotel.PurgeRunsMetric))
	require.Equal(t, map[attribute.Set]int64{
		attribute.NewSet(orders, inboxotel.AttrPurgeRows.String("keys")):     7,
		attribute.NewSet(orders, inboxotel.AttrPurgeRows.String("attempts")): 0,
	}, sums(inboxotel.PurgeDeletedMetric))
	hist := m[inboxotel.PurgeDurationMetric].Data.(metricdata.Histogram[float64]).DataPoints
	require.Len(t, hist, 1)
	require.EqualValues(t, 1, hist[0].Count)
	gauge := m[inboxotel.PurgeLastSuccessMetric].Data.(metricdata.Gauge[float64]).DataPoints
	require.Len(t, gauge, 1)
	require.GreaterOrEqual(t, gauge[0].Value, float64(before.UnixNano())/1e9)
}
