package inboxtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
)

// The kit works per tenant: messages name their tenant in metadata, and each tenant's
// wallet, in its own schema, is credited once per message, whatever the other tenants
// receive under the same UUIDs.
func TestKitPerTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newWallet(t).pool
	schemas := map[string]string{}
	for _, tenant := range []string{"acme", "globex"} {
		s := fmt.Sprintf("inboxtest_%s_%08x", tenant, rand.Uint32())
		schemas[tenant] = s
		t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+s+` CASCADE`) })
	}
	ts, err := inbox.NewTenantStore(inbox.TenantConfig{
		Lookup: func(_ context.Context, tenant string) (inbox.Tenant, error) {
			s, ok := schemas[tenant]
			if !ok {
				return inbox.Tenant{}, inbox.ErrUnknownTenant
			}
			store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: s, SearchPath: true})
			return inbox.Tenant{Store: store}, err
		},
		Tenants: func(context.Context) ([]string, error) { return []string{"acme", "globex"}, nil },
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ts.Close() })
	require.NoError(t, ts.CreateSchema(ctx))
	for _, s := range schemas {
		_, err := pool.Exec(ctx, `CREATE TABLE `+s+`.wallet (cents bigint NOT NULL); INSERT INTO `+s+`.wallet VALUES (0)`)
		require.NoError(t, err)
	}
	ib, err := inbox.New(inbox.Config{Store: ts, Consumer: "billing"})
	require.NoError(t, err)
	credit := func(msg *message.Message) error { // the tenant's wallet, by the transaction's search_path
		tx, err := inbox.RequireTx[pgx.Tx](msg.Context())
		if err == nil {
			_, err = tx.Exec(msg.Context(), `UPDATE wallet SET cents = cents + 190`)
		}
		return err
	}
	cents := func(tenant string) any {
		var c int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT cents FROM `+schemas[tenant]+`.wallet`).Scan(&c))
		return c
	}
	of := func(tenant, uuid string) *message.Message {
		msg := message.NewMessage(uuid, nil)
		msg.Metadata.Set(inbox.DefaultTenantMetadata, tenant)
		return msg
	}

	for _, tenant := range []string{"acme", "globex"} {
		require.NoError(t, inboxtest.CheckOnce(ib.Middleware, credit, of(tenant, "order-1"),
			func() (any, error) { return cents(tenant), nil }), tenant)
	}
	for _, tenant := range []string{"acme", "globex"} {
		results := inboxtest.DeliverConcurrently(ib.Middleware(inboxtest.HandlerFunc(credit)), of(tenant, "order-2"), 4)
		processed := 0
		for _, r := range results {
			require.NoError(t, r.Err)
			if !r.Duplicate {
				processed++
			}
		}
		require.Equal(t, 1, processed, tenant)
		require.EqualValues(t, 380, cents(tenant), "%s: order-1 and order-2, once each", tenant)
	}
	unknown := inboxtest.Deliver(ib.Middleware(inboxtest.HandlerFunc(credit)), of("initech", "order-1"))
	require.ErrorIs(t, unknown.Err, inbox.ErrUnknownTenant)
	require.Equal(t, inbox.OutcomeNoTenant, unknown.Outcome)
}
