package inboxotel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/oneline"
)

// The instruments an Observer records an inbox.Retention's runs to
// (RetentionConfig.Observer), with AttrRetention, and AttrTenant with
// Config.RecordTenant (a run of each tenant of an inbox.TenantStore).
const (
	// PurgeRunsMetric counts the runs (unit {run}) per AttrPurgeResult: purged, skipped
	// (another process held the purge turn), failed.
	PurgeRunsMetric = "inbox.purge.runs"
	// PurgeDeletedMetric counts the rows the runs deleted (unit {row}), per AttrPurgeRows:
	// keys, attempts.
	PurgeDeletedMetric = "inbox.purge.deleted"
	// PurgeDurationMetric is the histogram of the time a run held the turn and purged,
	// in seconds.
	PurgeDurationMetric = "inbox.purge.duration"
	// PurgeLastSuccessMetric is when this process last purged to the end, in Unix
	// seconds (a gauge). In a fleet the turn moves between processes: alert on the newest
	// across them.
	PurgeLastSuccessMetric = "inbox.purge.last_success"
)

// The attributes of the retention's instruments.
const (
	// AttrRetention is inbox.RetentionConfig.Name.
	AttrRetention = attribute.Key("inbox.retention")
	// AttrPurgeResult is inbox.RetentionRun.Result: purged, skipped, failed.
	AttrPurgeResult = attribute.Key("inbox.purge.result")
	// AttrPurgeRows is the kind of rows deleted: keys, attempts.
	AttrPurgeRows = attribute.Key("inbox.purge.rows")
)

// PurgeDurationBuckets are the purge-duration histogram's bucket boundaries, in seconds:
// 10 ms to about 45 minutes, quadrupling, as inboxprom's.
var PurgeDurationBuckets = []float64{0.01, 0.04, 0.16, 0.64, 2.56, 10.24, 40.96, 163.84, 655.36, 2621.44}

// retentionInstruments are the Observer's instruments of retention runs.
type retentionInstruments struct {
	runs, deleted metric.Int64Counter
	duration      metric.Float64Histogram
	lastSuccess   metric.Float64Gauge
}

func newRetentionInstruments(meter metric.Meter) (retentionInstruments, error) {
	var r retentionInstruments
	var errs [4]error
	r.runs, errs[0] = meter.Int64Counter(PurgeRunsMetric, metric.WithUnit("{run}"),
		metric.WithDescription("Runs of the inbox's retention purge, per result: purged, skipped (another process held the purge turn), failed."))
	r.deleted, errs[1] = meter.Int64Counter(PurgeDeletedMetric, metric.WithUnit("{row}"),
		metric.WithDescription("Rows deleted by the inbox's retention purge, per kind: keys, attempts."))
	r.duration, errs[2] = meter.Float64Histogram(PurgeDurationMetric, metric.WithUnit("s"),
		metric.WithDescription("Time a retention purge held the purge turn and purged."),
		metric.WithExplicitBucketBoundaries(PurgeDurationBuckets...))
	r.lastSuccess, errs[3] = meter.Float64Gauge(PurgeLastSuccessMetric, metric.WithUnit("s"),
		metric.WithDescription("When this process last ran the retention purge to the end (Unix seconds)."))
	if err := oneline.Join(errs[:]...); err != nil {
		return r, fmt.Errorf("inboxotel: creating the retention's instruments with the MeterProvider: %w", err)
	}
	return r, nil
}

var _ inbox.RetentionObserver = (*Observer)(nil)

// ObserveRetention implements inbox.RetentionObserver: pass the Observer as
// inbox.RetentionConfig.Observer too.
func (ob *Observer) ObserveRetention(ctx context.Context, run inbox.RetentionRun) {
	r := ob.retention
	base := []attribute.KeyValue{AttrRetention.String(run.Name)}
	if ob.cfg.RecordTenant && run.Tenant != "" {
		base = append(base, AttrTenant.String(run.Tenant))
	}
	with := func(kv attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributes(append(base[:len(base):len(base)], kv)...)
	}
	r.runs.Add(ctx, 1, with(AttrPurgeResult.String(run.Result())))
	if !run.Turn {
		return
	}
	r.deleted.Add(ctx, run.Keys, with(AttrPurgeRows.String("keys")))
	r.deleted.Add(ctx, run.Attempts, with(AttrPurgeRows.String("attempts")))
	r.duration.Record(ctx, run.Duration.Seconds(), metric.WithAttributes(base...))
	if run.Err == nil {
		r.lastSuccess.Record(ctx, float64(run.Start.Add(run.Duration).UnixNano())/float64(time.Second), metric.WithAttributes(base...))
	}
}
