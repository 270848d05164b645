package inboxprom_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxprom"
)

// newStore returns a PostgresStore on fresh tables of the test PostgreSQL (INBOX_POSTGRES_DSN),
// dropped when the test ends.
func newStore(t *testing.T) *inbox.PostgresStore {
	t.Helper()
	dsn := os.Getenv("INBOX_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		msg := fmt.Sprintf("PostgreSQL is not reachable (set INBOX_POSTGRES_DSN): %v", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(pool.Close)
	table := fmt.Sprintf("inboxprom_%08x", rand.Uint32())
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(ctx))
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize()+`, `+pgx.Identifier{table + "_attempts"}.Sanitize()+`, `+pgx.Identifier{table + "_offsets"}.Sanitize())
	})
	return store
}

func msg(id, payload string) *message.Message {
	m := message.NewMessage(fmt.Sprintf("uuid-%s-%s", id, payload), []byte(payload))
	if id != "" {
		m.Metadata.Set("id", id)
	}
	return m
}

func TestObserver_CountsARealInboxOutcomes(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	obs, err := inboxprom.New(reg)
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{
		Store:    newStore(t),
		Consumer: "payments",
		Key:      inbox.KeyFromMetadata("id"),
		Observer: obs,
	})
	require.NoError(t, err)

	ok := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	produces := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage("out-1", []byte("receipt"))}, nil
	})
	fails := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, errors.New("boom") })
	// A handler that ends the transaction itself makes the inbox's commit fail, after a claim.
	commitFails := ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
		tx, _ := inbox.TxFromContext[pgx.Tx](m.Context())
		return nil, tx.Rollback(m.Context())
	})

	steps := []struct {
		name    string
		handler message.HandlerFunc
		msg     *message.Message
		wantErr bool
	}{
		{name: "first delivery", handler: ok, msg: msg("a", "x")},
		{name: "redelivery", handler: ok, msg: msg("a", "x")},
		{name: "redelivery again", handler: ok, msg: msg("a", "x")},
		{name: "same key, other payload", handler: ok, msg: msg("a", "y")},
		{name: "first delivery with output", handler: produces, msg: msg("b", "x")},
		{name: "redelivery replays the output", handler: produces, msg: msg("b", "x")},
		{name: "handler error", handler: fails, msg: msg("c", "x"), wantErr: true},
		{name: "commit fails", handler: commitFails, msg: msg("d", "x"), wantErr: true},
		{name: "no key", handler: ok, msg: msg("", "x"), wantErr: true},
	}
	for _, s := range steps {
		_, err := s.handler(s.msg)
		if s.wantErr {
			require.Error(t, err, s.name)
		} else {
			require.NoError(t, err, s.name)
		}
	}

	want := map[inbox.Outcome]float64{
		inbox.OutcomeProcessed: 2,
		inbox.OutcomeDuplicate: 2,
		inbox.OutcomeMismatch:  1,
		inbox.OutcomeReplayed:  1,
		inbox.OutcomeFailed:    2,
		inbox.OutcomeNoKey:     1,
	}
	for outcome, n := range want {
		counter, err := obsCounter(reg, "payments", outcome)
		require.NoError(t, err)
		require.Equal(t, n, counter, "outcome %s", outcome)
	}
	require.Equal(t, 6, testutil.CollectAndCount(reg, inboxprom.MessagesTotal), "one series per outcome seen")

	// Every claim made (all but the keyless message), failed ones included, is one
	// claim-wait sample.
	samples, sum := histogram(t, reg, "payments")
	require.Equal(t, uint64(8), samples)
	require.Positive(t, sum)
}

func TestNew_RegistersOnce(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, err := inboxprom.New(reg)
	require.NoError(t, err)
	_, err = inboxprom.New(reg)
	var already prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &already)

	_, err = inboxprom.New(nil)
	require.ErrorContains(t, err, "registerer is nil")
}

// obsCounter reads inbox_messages_total{consumer, outcome} from what reg gathers.
func obsCounter(reg *prometheus.Registry, consumer string, outcome inbox.Outcome) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != inboxprom.MessagesTotal {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["consumer"] == consumer && labels["outcome"] == string(outcome) {
				return m.GetCounter().GetValue(), nil
			}
		}
	}
	return 0, fmt.Errorf("no %s series for consumer %q outcome %q", inboxprom.MessagesTotal, consumer, outcome)
}

// histogram returns the claim-wait histogram's sample count and sum for consumer.
func histogram(t *testing.T, reg *prometheus.Registry, consumer string) (uint64, float64) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != inboxprom.ClaimWaitSeconds {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == consumer {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("no %s series for consumer %q", inboxprom.ClaimWaitSeconds, consumer)
	return 0, 0
}

// With TenantLabel, each tenant's messages are a series of their own; without it, the
// series stay per consumer and outcome.
func TestObserver_TenantLabel(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	ctx := context.Background()
	for _, label := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		obs, err := inboxprom.NewWithConfig(inboxprom.Config{Registerer: reg, TenantLabel: label})
		require.NoError(t, err)
		ib, err := inbox.New(inbox.Config{Store: store, Observer: obs})
		require.NoError(t, err)
		consumer := fmt.Sprint("tenants-", label)
		for _, tenant := range []string{"acme", "acme", "globex"} {
			_, err := ib.Process(inbox.ContextWithTenant(ctx, tenant), consumer, tenant+"-order-1", func(context.Context) error { return nil })
			require.NoError(t, err)
		}
		if !label {
			require.Equal(t, 2, testutil.CollectAndCount(reg, inboxprom.MessagesTotal), "processed and duplicate, not per tenant")
			continue
		}
		require.Equal(t, 3, testutil.CollectAndCount(reg, inboxprom.MessagesTotal), "acme processed, acme's duplicate, globex processed")
		for _, tc := range []struct {
			tenant  string
			outcome inbox.Outcome
			want    float64
		}{{"acme", inbox.OutcomeProcessed, 1}, {"acme", inbox.OutcomeDuplicate, 1}, {"globex", inbox.OutcomeProcessed, 1}} {
			c, err := tenantCounter(reg, consumer, tc.outcome, tc.tenant)
			require.NoError(t, err)
			require.Equal(t, tc.want, c, "%s %s", tc.tenant, tc.outcome)
		}
	}
	_, err := inboxprom.NewWithConfig(inboxprom.Config{})
	require.ErrorContains(t, err, "registerer is nil")
}

// tenantCounter reads the messages counter of one consumer, outcome and tenant.
func tenantCounter(reg *prometheus.Registry, consumer string, outcome inbox.Outcome, tenant string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if f.GetName() == inboxprom.MessagesTotal && labels["consumer"] == consumer && labels["outcome"] == string(outcome) && labels["tenant"] == tenant {
				return m.GetCounter().GetValue(), nil
			}
		}
	}
	return 0, fmt.Errorf("no %s series for %s/%s/%s", inboxprom.MessagesTotal, consumer, outcome, tenant)
}
