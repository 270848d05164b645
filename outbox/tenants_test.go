package outbox_test

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/outbox"
)

// tenantOutboxes is a TenantStore over a schema per tenant of one pool, each schema
// with the Outbox's table; outboxTable names a tenant's.
type tenantOutboxes struct {
	pool    *pgxpool.Pool
	ts      *inbox.TenantStore
	ob      *outbox.Outbox
	tenants []string
	schemas map[string]string
}

func newTenantOutboxes(t *testing.T) tenantOutboxes {
	ctx := context.Background()
	pool := pgPool(t)
	tenants := []string{"acme", "globex"}
	schemas := map[string]string{}
	for _, tenant := range tenants {
		s := sqltest.Name("outbox_" + tenant)
		schemas[tenant] = s
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{s}.Sanitize()+` CASCADE`)
		})
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
		Tenants: func(context.Context) ([]string, error) { return tenants, nil },
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ts.Close() })
	require.NoError(t, ts.CreateSchema(ctx))

	ob, err := outbox.New(outbox.Config{ForwarderTopic: sqltest.Name("outbox")})
	require.NoError(t, err)
	for _, s := range schemas { // each tenant's outbox table, created as its Forwarder would
		cfg, err := pgxpool.ParseConfig(postgresDSN())
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["search_path"] = s
		tenantPool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(tenantPool.Close)
		require.NoError(t, outboxSubscriber(t, tenantPool, ob, "schema").SubscribeInitialize(ob.Config().ForwarderTopic))
	}
	return tenantOutboxes{pool: pool, ts: ts, ob: ob, tenants: tenants, schemas: schemas}
}

// outboxTable names tenant's outbox table.
func (o tenantOutboxes) outboxTable(tenant string) string {
	return pgx.Identifier{o.schemas[tenant], "watermill_" + o.ob.Config().ForwarderTopic}.Sanitize()
}

// The outbox in the tenant's transaction: with a schema per tenant and SearchPath, the
// outbox table's unqualified name resolves in the tenant's schema, so each tenant's
// emitted messages commit (and roll back) with its key, in its own outbox.
func TestOutboxPerTenantSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newTenantOutboxes(t)
	ts, ob, pool, tenants := o.ts, o.ob, o.pool, o.tenants

	ib, err := inbox.New(inbox.Config{Store: ts, Consumer: "billing"})
	require.NoError(t, err)
	boom := errors.New("provider timed out")
	handler := func(fail bool) message.HandlerFunc {
		return ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			tenant, _ := inbox.TenantFromContext(msg.Context())
			event := message.NewMessage(outbox.MessageID("billing", msg.UUID, "CashbackCredited"), []byte(tenant))
			if err := ob.Publish(msg.Context(), "cashback", event); err != nil {
				return nil, err
			}
			if fail {
				return nil, boom
			}
			return nil, nil
		})
	}
	deliver := func(tenant string, fail bool) error {
		msg := message.NewMessage("order-1", nil) // the same UUID in both tenants
		msg.Metadata.Set(inbox.DefaultTenantMetadata, tenant)
		_, err := handler(fail)(msg)
		return err
	}
	require.ErrorIs(t, deliver("acme", true), boom, "acme's first delivery fails after publishing")
	require.NoError(t, deliver("acme", false))
	require.NoError(t, deliver("globex", false))
	require.NoError(t, deliver("acme", false), "a duplicate publishes nothing")

	for _, tenant := range tenants {
		var rows int
		var payload string
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(max(payload::text), '') FROM `+o.outboxTable(tenant)).Scan(&rows, &payload))
		require.Equal(t, 1, rows, "%s's outbox: one message, the failed delivery's rolled back", tenant)
		require.Contains(t, payload, base64.StdEncoding.EncodeToString([]byte(tenant)), "the envelope carries %s's event", tenant)
	}
}

// Issue 32, defect 5: the same key in two tenants gave the same outbox ids
// (MessageIDFromContext left the tenant out), and an inbox downstream with default
// settings processed one of the two events: the other tenant's effect was lost.
func TestMessageIDsPerTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newTenantOutboxes(t)
	ib, err := inbox.New(inbox.Config{Store: o.ts, Consumer: "billing"})
	require.NoError(t, err)
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tenant, _ := inbox.TenantFromContext(msg.Context())
		id, err := outbox.MessageIDFromContext(msg.Context(), "CashbackCredited")
		if err != nil {
			return nil, err
		}
		return nil, o.ob.Publish(msg.Context(), "cashback", message.NewMessage(id, []byte(tenant)))
	})
	for _, tenant := range o.tenants {
		msg := message.NewMessage("order-1", nil) // the same key in both tenants
		msg.Metadata.Set(inbox.DefaultTenantMetadata, tenant)
		_, err := h(msg)
		require.NoError(t, err)
	}

	// Downstream, an inbox with default settings (keys from the UUID) consumes what the
	// tenants' forwarders publish: each tenant's event.
	down, _ := newInbox(t, o.pool, "downstream")
	var processed []string
	dh := down.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		processed = append(processed, string(msg.Payload))
		return nil, nil
	})
	ids := map[string]string{}
	for _, tenant := range o.tenants {
		var id string // the event's, in the forwarder's envelope
		require.NoError(t, o.pool.QueryRow(ctx, `SELECT payload::jsonb->>'uuid' FROM `+o.outboxTable(tenant)).Scan(&id))
		ids[tenant] = id
		_, err := dh(message.NewMessage(id, []byte(tenant)))
		require.NoError(t, err)
	}
	require.Equal(t, o.tenants, processed, "each tenant's event is a message of its own downstream")
	require.NotEqual(t, ids["acme"], ids["globex"])
}
