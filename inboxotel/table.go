package inboxotel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/oneline"
	"github.com/watermill-inbox/inbox/internal/tablestats"
)

// The gauges TableGauges reports: what the inbox table holds, per consumer
// (AttrConsumer), as of the last sample of the table (see TableConfig.Interval).
const (
	// TableKeysMetric is the number of keys, per consumer ({key}).
	TableKeysMetric = "inbox.table.keys"
	// TableOldestKeyAgeMetric is how long ago the oldest key was processed, per
	// consumer, in seconds.
	TableOldestKeyAgeMetric = "inbox.table.oldest_key.age"
	// TableUnfinishedAttemptsMetric is the number of attempts (inbox.Config.MaxAttempts)
	// that started and have not ended, per consumer ({attempt}): running now, or whose
	// process died. Observed when the store counts them (inbox.AttemptCounter).
	TableUnfinishedAttemptsMetric = "inbox.table.unfinished_attempts"
	// TableSampleAgeMetric is how old the last successful sample of the table is, in
	// seconds: alert when it grows much past the interval (the samples fail).
	TableSampleAgeMetric = "inbox.table.sample.age"
	// TableSampleDurationMetric is how long the last successful sample's queries took,
	// in seconds: what each sample costs the database.
	TableSampleDurationMetric = "inbox.table.sample.duration"
)

// Defaults of TableConfig.
const (
	DefaultTableInterval = 5 * time.Minute
	DefaultTableTimeout  = time.Minute
)

// TableConfig configures TableGauges.
type TableConfig struct {
	// Store is the inbox's store, whose Stats (and UnfinishedAttempts, when it is an
	// inbox.AttemptCounter) the gauges sample. Give it a store over a pool
	// (*pgxpool.Pool, *sql.DB): a sample runs in the background, beside the messages, and
	// a store on one *pgx.Conn or *sql.Conn would run it on the connection a message is
	// using (pgx refuses: conn busy). A second store on the same table, over a pool of
	// its own, serves. Required.
	Store inbox.Store

	// MeterProvider provides the meter (scope ScopeName). Defaults to
	// otel.GetMeterProvider(), the global one.
	MeterProvider metric.MeterProvider

	// Interval is the least time between two samples of the table. A sample counts the
	// keys of every consumer, which reads the whole table (Stats: on 10 M keys, a few
	// seconds of the database's time; see docs/operations.md), so it runs at most once
	// per Interval, in the background, whatever the number of collections: a collection
	// never waits on the database and observes the last sample. Defaults to
	// DefaultTableInterval.
	Interval time.Duration

	// Timeout bounds one sample's queries. Defaults to DefaultTableTimeout.
	Timeout time.Duration

	// Attributes are added to every observation, to tell apart the tables of one process
	// (e.g. attribute.String("inbox.table", "inbox_orders")). Defaults to none.
	Attributes []attribute.KeyValue
}

// TableGauges reports an inbox table's contents through OpenTelemetry observable gauges:
// TableKeysMetric, TableOldestKeyAgeMetric and TableUnfinishedAttemptsMetric per consumer, and the sampling's own
// TableSampleAgeMetric and TableSampleDurationMetric. It complements Observer, which
// counts what happens to messages. The first collection starts the first sample and
// observes nothing; a later one observes the table's. Close unregisters the gauges.
type TableGauges struct {
	sampler      *tablestats.Sampler
	registration metric.Registration
}

// NewTableGauges creates the gauges with cfg.MeterProvider and registers their callback.
// It fails when cfg is invalid, naming the field, or when the provider cannot create
// them.
func NewTableGauges(cfg TableConfig) (*TableGauges, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultTableInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTableTimeout
	}
	if err := tablestats.Check(cfg.Store, cfg.Interval, cfg.Timeout); err != nil {
		return nil, fmt.Errorf("inboxotel: invalid table config: %w", err)
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	meter := cfg.MeterProvider.Meter(ScopeName)
	keys, errKeys := meter.Int64ObservableGauge(TableKeysMetric, metric.WithUnit("{key}"),
		metric.WithDescription("Keys in the inbox table, per consumer, as of the last sample."))
	oldest, errOldest := meter.Float64ObservableGauge(TableOldestKeyAgeMetric, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest key in the inbox table, per consumer."))
	age, errAge := meter.Float64ObservableGauge(TableSampleAgeMetric, metric.WithUnit("s"),
		metric.WithDescription("Age of the last successful sample of the inbox table."))
	took, errTook := meter.Float64ObservableGauge(TableSampleDurationMetric, metric.WithUnit("s"),
		metric.WithDescription("How long the last successful sample of the inbox table took."))
	unfinished, errUnfinished := meter.Int64ObservableGauge(TableUnfinishedAttemptsMetric, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts that started and have not ended (running, or died), per consumer."))
	if err := oneline.Join(errKeys, errOldest, errAge, errTook, errUnfinished); err != nil {
		return nil, fmt.Errorf("inboxotel: creating the table gauges with the MeterProvider: %w", err)
	}
	g := &TableGauges{sampler: tablestats.New(cfg.Store, cfg.Interval, cfg.Timeout)}
	common := metric.WithAttributes(cfg.Attributes...)
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		sample, _ := g.sampler.Latest()
		if sample.At.IsZero() {
			return nil
		}
		now := time.Now()
		o.ObserveFloat64(age, now.Sub(sample.At).Seconds(), common)
		o.ObserveFloat64(took, sample.Took.Seconds(), common)
		consumer := func(name string) metric.ObserveOption {
			return metric.WithAttributes(append([]attribute.KeyValue{AttrConsumer.String(name)}, cfg.Attributes...)...)
		}
		for _, s := range sample.Consumers {
			o.ObserveInt64(keys, s.Keys, consumer(s.Consumer))
			o.ObserveFloat64(oldest, now.Sub(s.Oldest).Seconds(), consumer(s.Consumer))
		}
		if sample.Unfinished != nil { // the store counts them; 0 for a consumer with keys and none
			for _, name := range sample.Names() {
				o.ObserveInt64(unfinished, sample.Unfinished[name], consumer(name))
			}
		}
		return nil
	}, keys, oldest, age, took, unfinished)
	if err != nil {
		return nil, fmt.Errorf("inboxotel: registering the table gauges' callback: %w", err)
	}
	g.registration = reg
	return g, nil
}

// Refresh samples the table now, waiting for the result (or for the sample in progress),
// e.g. at startup so that the first collection has the table's gauges. It returns the
// sample's error.
func (g *TableGauges) Refresh(ctx context.Context) error {
	_, err := g.sampler.Refresh(ctx)
	return err
}

// Close unregisters the gauges' callback: they are no longer observed.
func (g *TableGauges) Close() error {
	return g.registration.Unregister()
}
