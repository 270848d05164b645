package inboxprom

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/tablestats"
)

// The metrics a TableCollector exports: what the inbox table holds, per consumer, as of
// the last sample of the table (see TableConfig.Interval).
const (
	// TableKeys is the number of keys, per consumer: the messages processed and kept.
	TableKeys = "inbox_table_keys"
	// TableOldestKeyAge is how long ago the oldest key was processed, per consumer, in
	// seconds: with a purge, about the retention; growing without bound, no purge runs.
	TableOldestKeyAge = "inbox_table_oldest_key_age_seconds"
	// TableUnfinishedAttempts is the number of attempts (inbox.Config.MaxAttempts) that
	// started and have not ended, per consumer: running now, or whose process died
	// (their rows stay until the purge). Exported when the store counts them
	// (inbox.AttemptCounter: the SQL stores).
	TableUnfinishedAttempts = "inbox_table_unfinished_attempts"
	// TableSampleTimestamp is when the last successful sample of the table was taken
	// (Unix time, seconds): alert when it falls behind by much more than the interval.
	TableSampleTimestamp = "inbox_table_sample_timestamp_seconds"
	// TableSampleDuration is how long the last successful sample's queries took: what
	// each sample costs the database.
	TableSampleDuration = "inbox_table_sample_duration_seconds"
	// TableSampleErrors counts samples that failed (the metrics then keep the last
	// successful sample's values).
	TableSampleErrors = "inbox_table_sample_errors_total"
)

// Defaults of TableConfig.
const (
	DefaultTableInterval = 5 * time.Minute
	DefaultTableTimeout  = time.Minute
)

// TableConfig configures a TableCollector.
type TableConfig struct {
	// Store is the inbox's store, whose Stats (and UnfinishedAttempts, when it is an
	// inbox.AttemptCounter) the collector samples. Give it a store over a pool
	// (*pgxpool.Pool, *sql.DB): a sample runs in the background, beside the messages, and
	// a store on one *pgx.Conn or *sql.Conn would run it on the connection a message is
	// using (pgx refuses: conn busy). A second store on the same table, over a pool of
	// its own, serves. Required.
	Store inbox.Store

	// Interval is the least time between two samples of the table. A sample counts the
	// keys of every consumer, which reads the whole table (Stats: on 10 M keys, a few
	// seconds of the database's time; see docs/operations.md), so it runs at most once
	// per Interval, in the background, whatever the number of scrapes: a scrape never
	// waits on the database and gets the last sample. Defaults to DefaultTableInterval.
	Interval time.Duration

	// Timeout bounds one sample's queries. Defaults to DefaultTableTimeout.
	Timeout time.Duration

	// Labels are constant labels on every metric of the collector, to tell apart the
	// tables of one process (e.g. {"table": "inbox_orders"}). Defaults to none.
	Labels prometheus.Labels
}

// TableCollector is a prometheus.Collector of an inbox table's contents: TableKeys,
// TableOldestKeyAge and TableUnfinishedAttempts per consumer, and the sampling's own TableSampleTimestamp,
// TableSampleDuration and TableSampleErrors. It complements Observer, which counts what
// happens to messages; this one shows what the table holds. The first scrape starts the
// first sample and exports only the sampling metrics; a later one gets the table's.
type TableCollector struct {
	sampler                                          *tablestats.Sampler
	keys, oldest, unfinished, at, took, sampleErrors *prometheus.Desc
}

var _ prometheus.Collector = (*TableCollector)(nil)

// NewTableCollector returns a TableCollector registered with reg. It fails when cfg is
// invalid, naming the field, or when reg refuses it (the same metrics with the same
// Labels registered twice).
func NewTableCollector(reg prometheus.Registerer, cfg TableConfig) (*TableCollector, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultTableInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTableTimeout
	}
	if err := tablestats.Check(cfg.Store, cfg.Interval, cfg.Timeout); err != nil {
		return nil, fmt.Errorf("inboxprom: invalid table config: %w", err)
	}
	if reg == nil {
		return nil, fmt.Errorf("inboxprom: the registerer is nil: pass prometheus.DefaultRegisterer or a *prometheus.Registry")
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cfg.Labels)
	}
	c := &TableCollector{
		sampler:      tablestats.New(cfg.Store, cfg.Interval, cfg.Timeout),
		keys:         desc(TableKeys, "Keys in the inbox table, per consumer, as of the last sample.", "consumer"),
		oldest:       desc(TableOldestKeyAge, "Age of the oldest key in the inbox table, per consumer, in seconds.", "consumer"),
		unfinished:   desc(TableUnfinishedAttempts, "Attempts that started and have not ended (running, or died), per consumer.", "consumer"),
		at:           desc(TableSampleTimestamp, "When the last successful sample of the inbox table was taken, Unix time in seconds."),
		took:         desc(TableSampleDuration, "How long the last successful sample of the inbox table took, in seconds."),
		sampleErrors: desc(TableSampleErrors, "Samples of the inbox table that failed."),
	}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("inboxprom: registering the inbox table metrics: %w", err)
	}
	return c, nil
}

// Describe implements prometheus.Collector.
func (c *TableCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.keys, c.oldest, c.unfinished, c.at, c.took, c.sampleErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the last sample, at once; it starts a new
// sample in the background when that one is older than the interval.
func (c *TableCollector) Collect(ch chan<- prometheus.Metric) {
	sample, failed := c.sampler.Latest()
	ch <- prometheus.MustNewConstMetric(c.sampleErrors, prometheus.CounterValue, float64(failed))
	if sample.At.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.at, prometheus.GaugeValue, float64(sample.At.UnixNano())/1e9)
	ch <- prometheus.MustNewConstMetric(c.took, prometheus.GaugeValue, sample.Took.Seconds())
	now := time.Now()
	for _, s := range sample.Consumers {
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(s.Keys), s.Consumer)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, now.Sub(s.Oldest).Seconds(), s.Consumer)
	}
	if sample.Unfinished == nil { // the store does not count them
		return
	}
	for _, consumer := range sample.Names() { // 0 for a consumer with keys and none
		ch <- prometheus.MustNewConstMetric(c.unfinished, prometheus.GaugeValue, float64(sample.Unfinished[consumer]), consumer)
	}
}

// Refresh samples the table now, waiting for the result (or for the sample in progress),
// e.g. at startup so that the first scrape has the table's metrics. It returns the
// sample's error.
func (c *TableCollector) Refresh(ctx context.Context) error {
	_, err := c.sampler.Refresh(ctx)
	return err
}
