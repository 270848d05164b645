// Package inboxprom exposes an inbox's outcomes as Prometheus metrics, through
// github.com/prometheus/client_golang as Watermill's own metrics do, and what its table
// holds. It is a package of its own so that the inbox package never imports Prometheus:
// users without it pay nothing.
//
//	obs, err := inboxprom.New(prometheus.DefaultRegisterer) // deliveries and claim waits
//	...
//	ib, err := inbox.New(inbox.Config{Store: store, Observer: obs})
//
//	// keys, oldest key age per consumer, sampled at most every 5 minutes
//	table, err := inboxprom.NewTableCollector(prometheus.DefaultRegisterer, inboxprom.TableConfig{Store: store})
package inboxprom

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watermill-inbox/inbox"
)

// The metrics an Observer exports.
const (
	// MessagesTotal counts deliveries per consumer and outcome (inbox.Outcome: processed,
	// duplicate, replayed, mismatch, failed, no_key, contended, too_many_attempts,
	// no_tenant), and per tenant with Config.TenantLabel: each
	// pass of a message through the inbox counts once, so one message that fails twice,
	// is retried, then redelivered as a duplicate counts four times (failed 2, processed
	// 1, duplicate 1). It counts deliveries, not distinct messages: the processed outcome
	// alone counts each message at most once per consumer; TableCollector's TableKeys
	// counts the messages the table keeps.
	MessagesTotal = "inbox_messages_total"
	// ClaimWaitSeconds is the time a message's key claim took, per consumer. A claim that
	// waited on a concurrent duplicate's transaction shows here as a slow one.
	ClaimWaitSeconds = "inbox_claim_wait_seconds"
)

// ClaimWaitBuckets are the claim-wait histogram's buckets, in seconds: 0.5 ms to about
// 16 s, doubling.
var ClaimWaitBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

// Observer is an inbox.Observer that counts outcomes and claim waits in Prometheus
// collectors, and an inbox.RetentionObserver that counts the purges of an
// inbox.Retention (PurgeRunsTotal...). It is safe for concurrent use.
type Observer struct {
	messages  *prometheus.CounterVec
	claimWait *prometheus.HistogramVec
	tenant    bool
	retention retentionMetrics
}

// Config configures an Observer made with NewWithConfig.
type Config struct {
	// Registerer registers the Observer's collectors: prometheus.DefaultRegisterer, or
	// a registry of your own. Required.
	Registerer prometheus.Registerer

	// TenantLabel adds the label "tenant" (inbox.Observation.Tenant, empty for a message
	// without one) to both metrics, and to the retention's (inbox.RetentionRun.Tenant),
	// for an inbox on an inbox.TenantStore. Each tenant
	// multiplies the series, so it is off unless asked for: with many tenants, keep it
	// off and label by tenant in traces (inboxotel) or logs. Defaults to false.
	TenantLabel bool
}

var _ inbox.Observer = (*Observer)(nil)

// New returns an Observer whose collectors are registered with reg (for example
// prometheus.DefaultRegisterer, or a registry of your own). One Observer can serve every
// inbox of a process: the consumer is a label. Registering twice with the same reg fails.
func New(reg prometheus.Registerer) (*Observer, error) {
	return NewWithConfig(Config{Registerer: reg})
}

// NewWithConfig is New with the options of cfg.
func NewWithConfig(cfg Config) (*Observer, error) {
	reg := cfg.Registerer
	if reg == nil {
		return nil, errors.New("inboxprom: the registerer is nil: pass prometheus.DefaultRegisterer or a *prometheus.Registry")
	}
	messageLabels, waitLabels := []string{"consumer", "outcome"}, []string{"consumer"}
	if cfg.TenantLabel {
		messageLabels, waitLabels = append(messageLabels, "tenant"), append(waitLabels, "tenant")
	}
	o := &Observer{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MessagesTotal,
			Help: "Deliveries handled by the inbox, per consumer and outcome (a message delivered twice counts twice).",
		}, messageLabels),
		claimWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ClaimWaitSeconds,
			Help:    "Time spent claiming a message's inbox key, waits on a concurrent duplicate included.",
			Buckets: ClaimWaitBuckets,
		}, waitLabels),
		tenant:    cfg.TenantLabel,
		retention: newRetentionMetrics(cfg.TenantLabel),
	}
	for _, c := range append([]prometheus.Collector{o.messages, o.claimWait}, o.retention.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("inboxprom: registering the inbox metrics: %w", err)
		}
	}
	return o, nil
}

// Observe implements inbox.Observer. A message that made no claim (no key, or a store
// failure before the claim) is counted but adds no claim-wait sample; a claim that failed
// or was refused adds its real time. Neither the key nor the message UUID becomes a label.
func (o *Observer) Observe(_ context.Context, ob inbox.Observation) {
	if o.tenant {
		o.messages.WithLabelValues(ob.Consumer, string(ob.Outcome), ob.Tenant).Inc()
		if ob.ClaimWait > 0 {
			o.claimWait.WithLabelValues(ob.Consumer, ob.Tenant).Observe(ob.ClaimWait.Seconds())
		}
		return
	}
	o.messages.WithLabelValues(ob.Consumer, string(ob.Outcome)).Inc()
	if ob.ClaimWait > 0 {
		o.claimWait.WithLabelValues(ob.Consumer).Observe(ob.ClaimWait.Seconds())
	}
}
