package inboxotel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxotel"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// collect reads the reader's gauges: metric name → consumer ("" for none) → value.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			points := map[string]float64{}
			switch data := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					c, _ := p.Attributes.Value(inboxotel.AttrConsumer)
					points[c.AsString()] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range data.DataPoints {
					c, _ := p.Attributes.Value(inboxotel.AttrConsumer)
					points[c.AsString()] = p.Value
					table, _ := p.Attributes.Value("inbox.table")
					require.Equal(t, "orders", table.AsString(), "the configured attributes on every point")
				}
			}
			out[m.Name] = points
		}
	}
	return out
}

// The gauges report what the table holds per consumer, from samples taken at most once
// per interval whatever the collections, on PostgreSQL (database/sql) and MariaDB.
func TestTableGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range sqltest.Databases() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			db := d.Open(t)
			real, table := d.Store(t, db)
			store := &sqltest.CountingStore{Store: real}
			ib, err := inbox.New(inbox.Config{Store: real, MaxAttempts: 3})
			require.NoError(t, err)
			func() { // an attempt of receipts' that never ends: its handler panicked
				defer func() { require.NotNil(t, recover()) }()
				_, _ = ib.Process(ctx, "receipts", "order-p", func(context.Context) error { panic("handler bug") })
			}()
			for _, key := range []string{"order-a", "order-b"} {
				_, err := ib.Process(ctx, "billing", key, func(context.Context) error { return nil })
				require.NoError(t, err)
			}
			d.KeyAnHourOld(t, db, table, "billing", "order-a")

			reader := sdkmetric.NewManualReader()
			g, err := inboxotel.NewTableGauges(inboxotel.TableConfig{
				Store: store, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
				Attributes: []attribute.KeyValue{attribute.String("inbox.table", "orders")},
			})
			require.NoError(t, err)
			require.Empty(t, collect(t, reader)[inboxotel.TableKeysMetric], "the first collection starts the first sample")
			require.NoError(t, g.Refresh(ctx))
			// Refresh waited for the first collection's sample, or sampled again if that
			// one had already ended: one sample or two so far, and none running.
			sampled := store.Samples.Load()
			require.Contains(t, []int32{1, 2}, sampled)
			for range 3 {
				got := collect(t, reader)
				require.Equal(t, map[string]float64{"billing": 2}, got[inboxotel.TableKeysMetric])
				require.Equal(t, map[string]float64{"billing": 0, "receipts": 1}, got[inboxotel.TableUnfinishedAttemptsMetric], "receipts has an attempt and no key")
				require.GreaterOrEqual(t, got[inboxotel.TableOldestKeyAgeMetric]["billing"], 3600.0)
				require.Contains(t, got, inboxotel.TableSampleAgeMetric)
				require.Contains(t, got, inboxotel.TableSampleDurationMetric)
			}
			require.Equal(t, sampled, store.Samples.Load(), "one sample per interval, whatever the collections")

			require.NoError(t, g.Close())
			require.Empty(t, collect(t, reader)[inboxotel.TableKeysMetric], "closed: no longer observed")
		})
	}
}

func TestNewTableGaugesRefusesInvalidConfig(t *testing.T) {
	t.Parallel()
	_, err := inboxotel.NewTableGauges(inboxotel.TableConfig{Interval: -1})
	require.Error(t, err)
	require.Contains(t, err.Error(), "Store is nil")
	require.Contains(t, err.Error(), "Interval")
	require.NotContains(t, err.Error(), "\n")
	require.Equal(t, 1, strings.Count(err.Error(), "inboxotel:"))
}
