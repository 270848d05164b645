package inboxotel_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

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
