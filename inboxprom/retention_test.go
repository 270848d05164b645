package inboxprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxprom"
)

// sample returns the metric of family name whose labels are labels, nil when none is.
func sample(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m
		}
	}
	return nil
}

// A Retention on the real PostgreSQL store, observed: a run that finds the turn held
// elsewhere counts as skipped and nothing else; a run that purges counts its rows, its
// duration and its time.
func TestObserver_Retention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.NoError(t, err)
	for _, key := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		_, err := ib.Process(ctx, "billing", key, func(context.Context) error { return nil })
		require.NoError(t, err)
	}
	reg := prometheus.NewRegistry()
	obs, err := inboxprom.New(reg)
	require.NoError(t, err)
	r, err := inbox.NewRetention(inbox.RetentionConfig{Store: store, Name: "orders", Observer: obs,
		Purge: inbox.PurgeConfig{OlderThan: time.Nanosecond, Force: true, BatchSize: 5}})
	require.NoError(t, err)

	held, err := store.TakePurgeTurn(ctx, time.Second)
	require.NoError(t, err)
	require.NotNil(t, held)
	_, err = r.Purge(ctx)
	require.NoError(t, err)
	require.NoError(t, held.Release(ctx))
	require.Equal(t, 1.0, sample(t, reg, inboxprom.PurgeRunsTotal, map[string]string{"retention": "orders", "result": "skipped"}).GetCounter().GetValue())
	require.Nil(t, sample(t, reg, inboxprom.PurgeLastSuccess, map[string]string{"retention": "orders"}), "no success yet")

	before := time.Now()
	runs, err := r.Purge(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 7, runs[0].Keys)
	require.Equal(t, 1.0, sample(t, reg, inboxprom.PurgeRunsTotal, map[string]string{"retention": "orders", "result": "purged"}).GetCounter().GetValue())
	require.Equal(t, 7.0, sample(t, reg, inboxprom.PurgeDeletedTotal, map[string]string{"retention": "orders", "rows": "keys"}).GetCounter().GetValue())
	require.Equal(t, 0.0, sample(t, reg, inboxprom.PurgeDeletedTotal, map[string]string{"retention": "orders", "rows": "attempts"}).GetCounter().GetValue())
	require.EqualValues(t, 1, sample(t, reg, inboxprom.PurgeDurationSeconds, map[string]string{"retention": "orders"}).GetHistogram().GetSampleCount())
	last := sample(t, reg, inboxprom.PurgeLastSuccess, map[string]string{"retention": "orders"}).GetGauge().GetValue()
	require.GreaterOrEqual(t, last, float64(before.UnixNano())/1e9)
	require.Nil(t, sample(t, reg, inboxprom.PurgeRunsTotal, map[string]string{"retention": "orders", "result": "failed"}))
}
