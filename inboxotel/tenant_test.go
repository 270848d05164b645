package inboxotel_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxotel"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// RecordTenant: the tenant is an attribute of the metric series and of the span; without
// it, neither carries one.
func TestObserver_RecordTenant(t *testing.T) {
	t.Parallel()
	store := brokertest.Store(t, brokertest.PgPool(t), brokertest.Name("inboxotel"), true)
	for _, record := range []bool{true, false} {
		b := setup(t, inboxotel.Config{RecordTenant: record})
		ib, err := inbox.New(inbox.Config{Store: store, Observer: b.obs})
		require.NoError(t, err)
		consumer := fmt.Sprint("tenants-", record)
		for _, tenant := range []string{"acme", "globex"} {
			ctx, span := b.tracer.Start(inbox.ContextWithTenant(context.Background(), tenant), "webhook")
			_, err := ib.Process(ctx, consumer, tenant+"-delivery-1", func(context.Context) error { return nil })
			span.End()
			require.NoError(t, err)
		}
		spans := b.spans.Ended()
		require.Len(t, spans, 2)
		points := b.metrics(t)[inboxotel.MessagesMetric].Data.(metricdata.Sum[int64]).DataPoints
		if !record {
			require.NotContains(t, attrs(spans[0]), inboxotel.AttrTenant)
			require.Len(t, points, 1, "one series for both tenants")
			continue
		}
		require.Equal(t, "acme", attrs(spans[0])[inboxotel.AttrTenant].AsString())
		require.Equal(t, "globex", attrs(spans[1])[inboxotel.AttrTenant].AsString())
		require.Len(t, points, 2, "a series per tenant")
		for _, p := range points {
			tenant, ok := p.Attributes.Value(inboxotel.AttrTenant)
			require.True(t, ok)
			require.Contains(t, []string{"acme", "globex"}, tenant.AsString())
		}
	}
}

// RecordKey puts the key's tenant on the span with the key, RecordTenant or not: a key
// names a message only in its tenant (ADR 143). The metrics keep one series.
func TestObserver_RecordKeyNamesItsTenant(t *testing.T) {
	t.Parallel()
	store := brokertest.Store(t, brokertest.PgPool(t), brokertest.Name("inboxotel"), true)
	b := setup(t, inboxotel.Config{RecordKey: true})
	ib, err := inbox.New(inbox.Config{Store: store, Observer: b.obs})
	require.NoError(t, err)
	for _, tenant := range []string{"acme", "globex", ""} {
		ctx, span := b.tracer.Start(context.Background(), "webhook")
		if tenant != "" {
			ctx = inbox.ContextWithTenant(ctx, tenant)
		}
		_, err := ib.Process(ctx, "keys", "delivery-1-"+tenant, func(context.Context) error { return nil })
		span.End()
		require.NoError(t, err)
	}
	spans := b.spans.Ended()
	require.Len(t, spans, 3)
	for i, tenant := range []string{"acme", "globex"} {
		require.Equal(t, tenant, attrs(spans[i])[inboxotel.AttrTenant].AsString())
		require.Contains(t, attrs(spans[i]), inboxotel.AttrKey)
	}
	require.NotContains(t, attrs(spans[2]), inboxotel.AttrTenant, "no tenant, none named")
	points := b.metrics(t)[inboxotel.MessagesMetric].Data.(metricdata.Sum[int64]).DataPoints
	require.Len(t, points, 1, "one series: the span only")
}
