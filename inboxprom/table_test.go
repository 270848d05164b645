package inboxprom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxprom"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// gather returns the registry's metrics by name, each as its samples by consumer label
// ("" for none).
func gather(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]map[string]float64{}
	for _, f := range families {
		out[f.GetName()] = map[string]float64{}
		for _, m := range f.GetMetric() {
			consumer := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" {
					consumer = l.GetValue()
				}
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() // one of them is nil: 0
			out[f.GetName()][consumer] = v
		}
	}
	return out
}

// The collector exports what the table holds per consumer, from samples taken at most
// once per interval whatever the scrapes, on PostgreSQL (database/sql) and MariaDB.
func TestTableCollector(t *testing.T) {
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
			sqltest.AbandonAttempt(ctx, t, ib, "billing", "order-p") // an attempt that never ends
			for consumer, keys := range map[string]int{"billing": 3, "receipts": 1} {
				for i := range keys {
					_, err := ib.Process(ctx, consumer, "order-"+string(rune('a'+i)), func(context.Context) error { return nil })
					require.NoError(t, err)
				}
			}
			d.KeyAnHourOld(t, db, table, "billing", "order-a")

			reg := prometheus.NewRegistry()
			c, err := inboxprom.NewTableCollector(reg, inboxprom.TableConfig{Store: store, Labels: prometheus.Labels{"table": table}})
			require.NoError(t, err)
			first := gather(t, reg) // starts the first sample; nothing of the table yet
			require.NotContains(t, first, inboxprom.TableKeys)
			require.Equal(t, map[string]float64{"": 0}, first[inboxprom.TableSampleErrors])

			// Refresh waits for that sample, or samples again if it had already ended: one
			// sample or two so far, and none running.
			require.NoError(t, c.Refresh(ctx))
			sampled := store.Samples.Load()
			require.Contains(t, []int32{1, 2}, sampled)
			got := gather(t, reg)
			require.Equal(t, map[string]float64{"billing": 3, "receipts": 1}, got[inboxprom.TableKeys])
			require.GreaterOrEqual(t, got[inboxprom.TableOldestKeyAge]["billing"], 3600.0)
			require.Less(t, got[inboxprom.TableOldestKeyAge]["receipts"], 3600.0)
			require.Equal(t, map[string]float64{"billing": 1, "receipts": 0}, got[inboxprom.TableUnfinishedAttempts])
			require.Contains(t, got, inboxprom.TableSampleTimestamp)
			require.Contains(t, got, inboxprom.TableSampleDuration)

			// More keys, scraped again within the interval (5 minutes): the same sample,
			// and no query.
			_, err = ib.Process(ctx, "receipts", "order-z", func(context.Context) error { return nil })
			require.NoError(t, err)
			for range 5 {
				require.Equal(t, map[string]float64{"billing": 3, "receipts": 1}, gather(t, reg)[inboxprom.TableKeys])
			}
			require.Equal(t, sampled, store.Samples.Load(), "one sample per interval, whatever the scrapes")
			require.NoError(t, c.Refresh(ctx)) // a sample asked for: the new key shows
			require.Equal(t, map[string]float64{"billing": 3, "receipts": 2}, gather(t, reg)[inboxprom.TableKeys])
		})
	}
}

// A sample that fails is counted, and the metrics keep the last good sample's values.
func TestTableCollectorSampleFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := sqltest.Databases()[0]
	db := d.Open(t)
	store, table := d.Store(t, db)
	_, err := store.Forget(ctx, "billing", "x") // the table works
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	c, err := inboxprom.NewTableCollector(reg, inboxprom.TableConfig{Store: store})
	require.NoError(t, err)
	require.NoError(t, c.Refresh(ctx))
	_, err = db.ExecContext(ctx, "DROP TABLE "+d.Quote(table))
	require.NoError(t, err)
	err = c.Refresh(ctx)
	require.ErrorIs(t, err, inbox.ErrNoTable)
	got := gather(t, reg)
	require.Equal(t, map[string]float64{"": 1}, got[inboxprom.TableSampleErrors])
	require.Contains(t, got, inboxprom.TableSampleTimestamp, "the last good sample's")
}

func TestNewTableCollectorRefusesInvalidConfig(t *testing.T) {
	t.Parallel()
	_, err := inboxprom.NewTableCollector(prometheus.NewRegistry(), inboxprom.TableConfig{Interval: -1, Timeout: -1})
	require.Error(t, err)
	for _, field := range []string{"Store", "Interval", "Timeout"} {
		require.Contains(t, err.Error(), field)
	}
	require.NotContains(t, err.Error(), "\n")
	require.Equal(t, 1, strings.Count(err.Error(), "inboxprom:"))
}
