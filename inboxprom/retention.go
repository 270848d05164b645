package inboxprom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watermill-inbox/inbox"
)

// The metrics an Observer exports for an inbox.Retention (RetentionConfig.Observer), per
// retention (RetentionConfig.Name), and per tenant with Config.TenantLabel (a run of
// each tenant of an inbox.TenantStore; without the label they add up).
const (
	// PurgeRunsTotal counts the runs per result: purged, skipped (another process held
	// the purge turn) and failed. In a fleet, each interval makes one purged run across
	// the processes and skipped ones in the others.
	PurgeRunsTotal = "inbox_purge_runs_total"
	// PurgeDeletedTotal counts the rows the runs deleted, per kind of row: keys, and
	// attempts (the rows of inbox.Config.MaxAttempts).
	PurgeDeletedTotal = "inbox_purge_deleted_total"
	// PurgeDurationSeconds is the histogram of the time a run held the turn and purged.
	PurgeDurationSeconds = "inbox_purge_duration_seconds"
	// PurgeLastSuccess is when this process last purged to the end (Unix time,
	// seconds). In a fleet the turn moves between processes: alert on the newest across
	// them, e.g. time() - max by (retention, tenant) (inbox_purge_last_success_timestamp_seconds)
	// above a few intervals.
	PurgeLastSuccess = "inbox_purge_last_success_timestamp_seconds"
)

// PurgeDurationBuckets are the purge-duration histogram's buckets, in seconds: 10 ms to
// about 45 minutes, quadrupling.
var PurgeDurationBuckets = prometheus.ExponentialBuckets(0.01, 4, 10)

// retentionMetrics are the Observer's collectors of retention runs.
type retentionMetrics struct {
	runs, deleted *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	lastSuccess   *prometheus.GaugeVec
}

func newRetentionMetrics(tenant bool) retentionMetrics {
	labels := []string{"retention"}
	if tenant {
		labels = append(labels, "tenant")
	}
	return retentionMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: PurgeRunsTotal,
			Help: "Runs of the inbox's retention purge, per result: purged, skipped (another process held the purge turn), failed.",
		}, append(labels, "result")),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: PurgeDeletedTotal,
			Help: "Rows deleted by the inbox's retention purge, per kind: keys, attempts.",
		}, append(labels, "rows")),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    PurgeDurationSeconds,
			Help:    "Time a retention purge held the purge turn and purged.",
			Buckets: PurgeDurationBuckets,
		}, labels),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: PurgeLastSuccess,
			Help: "When this process last ran the retention purge to the end (Unix seconds).",
		}, labels),
	}
}

func (m retentionMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.runs, m.deleted, m.duration, m.lastSuccess}
}

var _ inbox.RetentionObserver = (*Observer)(nil)

// ObserveRetention implements inbox.RetentionObserver: pass the Observer as
// inbox.RetentionConfig.Observer too.
func (o *Observer) ObserveRetention(_ context.Context, run inbox.RetentionRun) {
	m := o.retention
	labels := []string{run.Name}
	if o.tenant {
		labels = append(labels, run.Tenant)
	}
	with := func(v string) []string { return append(labels[:len(labels):len(labels)], v) }
	m.runs.WithLabelValues(with(run.Result())...).Inc()
	if !run.Turn {
		return
	}
	m.deleted.WithLabelValues(with("keys")...).Add(float64(run.Keys))
	m.deleted.WithLabelValues(with("attempts")...).Add(float64(run.Attempts))
	m.duration.WithLabelValues(labels...).Observe(run.Duration.Seconds())
	if run.Err == nil {
		m.lastSuccess.WithLabelValues(labels...).Set(float64(run.Start.Add(run.Duration).UnixNano()) / 1e9)
	}
}
