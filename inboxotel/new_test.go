package inboxotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxotel"
)

// failingMeter is a meter that cannot create instruments.
type failingMeter struct{ noop.Meter }

func (failingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errors.New("counter refused")
}

func (failingMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return nil, errors.New("histogram refused")
}

type failingProvider struct{ noop.MeterProvider }

func (failingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

func TestNew_ReturnsInstrumentErrors(t *testing.T) {
	t.Parallel()
	_, err := inboxotel.New(inboxotel.Config{MeterProvider: failingProvider{}})
	require.ErrorContains(t, err, "inboxotel: creating the instruments")
	require.ErrorContains(t, err, "counter refused")
	require.ErrorContains(t, err, "histogram refused")
}

// A nil MeterProvider is the global one, even when it is set after New. Not parallel: it
// sets the process-wide provider (and puts the previous one back).
func TestNew_DefaultsToTheGlobalProvider(t *testing.T) {
	obs, err := inboxotel.New(inboxotel.Config{})
	require.NoError(t, err)

	reader := sdkmetric.NewManualReader()
	previous := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(previous) })

	obs.Observe(context.Background(), inbox.Observation{Consumer: "billing", Outcome: inbox.OutcomeProcessed, ClaimWait: time.Millisecond})
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	require.Equal(t, inboxotel.ScopeName, rm.ScopeMetrics[0].Scope.Name)
	require.Len(t, rm.ScopeMetrics[0].Metrics, 2, "the counter and the histogram")
}
