// Command tenants runs one cashback consumer for several tenants on a real PostgreSQL
// and Watermill's GoChannel: acme and globex each have a database of their own (a pool
// each), umbrella a schema in the shared database. Every message names its tenant in the
// metadata field "tenant"; an inbox.TenantStore keeps its key, and the handler's write,
// in that tenant's place. A message whose tenant is missing or unknown goes to the
// poison queue without touching any tenant. A purge runs across all tenants.
//
//	go run ./_examples/tenants
//
// It uses INBOX_POSTGRES_DSN, by default postgres://postgres@127.0.0.1:5432/test, and
// creates (and drops) the databases example_tenant_acme and example_tenant_globex.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/url"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/exampleenv"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// tenantDatabases are the tenants with a database of their own; umbrella has a schema.
var tenantDatabases = map[string]string{"acme": "example_tenant_acme", "globex": "example_tenant_globex"}

func run(ctx context.Context) error {
	dsn := exampleenv.PostgresDSN()
	shared, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer shared.Close()
	if err := createPlaces(ctx, shared); err != nil {
		return err
	}
	defer dropPlaces(shared)

	// The tenant directory: a lookup with a cache, so tenants can be added while the
	// consumer runs. Each tenant's pool is opened on its first message, once.
	tenants, err := inbox.NewTenantStore(inbox.TenantConfig{
		Lookup: func(ctx context.Context, tenant string) (inbox.Tenant, error) {
			if tenant == "umbrella" { // a schema on the shared pool
				store, err := inbox.NewPostgresStore(shared, inbox.PostgresConfig{Schema: "example_umbrella", SearchPath: true})
				return inbox.Tenant{Store: store}, err
			}
			db, ok := tenantDatabases[tenant]
			if !ok {
				return inbox.Tenant{}, fmt.Errorf("%w: %q has no database", inbox.ErrUnknownTenant, tenant)
			}
			pool, err := pgxpool.New(ctx, withDatabase(dsn, db))
			if err != nil {
				return inbox.Tenant{}, err
			}
			store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{})
			return inbox.Tenant{Store: store, Close: pool.Close}, err
		},
		Tenants: func(context.Context) ([]string, error) { return []string{"acme", "globex", "umbrella"}, nil },
	})
	if err != nil {
		return err
	}
	defer tenants.Close()
	if err := tenants.CreateSchema(ctx); err != nil { // every tenant's inbox tables
		return err
	}
	ib, err := inbox.New(inbox.Config{Store: tenants}) // tenant from metadata "tenant"
	if err != nil {
		return err
	}

	// The handler does not know about tenants: its unqualified table is the tenant's.
	cashback := func(msg *message.Message) error {
		tx, err := inbox.RequireTx[pgx.Tx](msg.Context())
		if err != nil {
			return err
		}
		_, err = tx.Exec(msg.Context(), `UPDATE example_wallets SET cents = cents + 190`)
		return err
	}

	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	poisoned := gochannel.NewGoChannel(gochannel.Config{}, logger)
	poison, err := middleware.PoisonQueueWithFilter(poisoned, "orders_poison", func(err error) bool {
		return errors.Is(err, inbox.ErrUnknownTenant) || errors.Is(err, inbox.ErrNoTenant) // permanent
	})
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	outcomes := make(chan string, 8)
	router.AddMiddleware(report(outcomes), poison, ib.Middleware)
	router.AddConsumerHandler("cashback", "orders", pubSub, cashback)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = router.Run(runCtx) }()
	<-router.Running()

	order := func(uuid, tenant string) *message.Message {
		msg := message.NewMessage(uuid, []byte(`{"cashback_cents":190}`))
		if tenant != "" {
			msg.Metadata.Set("tenant", tenant)
		}
		return msg
	}
	const once, twice = "acme 1.90, globex 1.90, umbrella 0.00", "acme 1.90, globex 1.90, umbrella 1.90"
	steps := []struct {
		say, want string // want: the wallets after the step
		msg       *message.Message
	}{
		{"OrderPaid order-1 for acme", "acme 1.90, globex 0.00, umbrella 0.00", order("order-1", "acme")},
		{"OrderPaid order-1 for globex (the same message id)", once, order("order-1", "globex")},
		{"order-1 for acme delivered again", once, order("order-1", "acme")},
		{"OrderPaid order-1 for umbrella (a schema)", twice, order("order-1", "umbrella")},
		{"OrderPaid order-2 for initech (unknown tenant)", twice, order("order-2", "initech")},
		{"OrderPaid order-3 without a tenant", twice, order("order-3", "")},
	}
	for i, step := range steps {
		if err := pubSub.Publish("orders", step.msg); err != nil {
			return err
		}
		select {
		case o := <-outcomes:
			w, err := wallets(ctx, shared, dsn)
			if err != nil {
				return err
			}
			fmt.Printf("%d. %-52s → %-34s wallets %s\n", i+1, step.say, o, w)
			if w != step.want {
				return fmt.Errorf("step %d: the wallets should be %s", i+1, step.want)
			}
		case <-time.After(10 * time.Second):
			return fmt.Errorf("step %d: no outcome", i+1)
		}
	}
	if err := router.Close(); err != nil {
		return err
	}

	purges, err := inbox.PurgeTenants(ctx, tenants, inbox.PurgeConfig{OlderThan: 30 * 24 * time.Hour})
	if err != nil {
		return err
	}
	var parts []string
	for _, p := range purges {
		parts = append(parts, fmt.Sprintf("%s %d", p.Tenant, p.Deleted))
	}
	fmt.Printf("7. %-52s → keys deleted: %s\n", "purge across tenants (keys older than 30 days)", strings.Join(parts, ", "))
	return nil
}

// report is an outer middleware that tells the example what became of each message.
func report(outcomes chan<- string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			switch {
			case err != nil:
				outcomes <- "failed: " + err.Error()
			case msg.Metadata.Get(middleware.ReasonForPoisonedKey) != "":
				outcomes <- "poison queue (" + string(inbox.Outcome(msg.Metadata.Get(inbox.MetadataOutcome))) + ")"
			case msg.Metadata.Get(inbox.MetadataDuplicate) == "true":
				outcomes <- "duplicate, skipped"
			default:
				outcomes <- "credited 1.90 to " + msg.Metadata.Get("tenant")
			}
			return produced, err
		}
	}
}

// wallets reads every tenant's wallet.
func wallets(ctx context.Context, shared *pgxpool.Pool, dsn string) (string, error) {
	var parts []string
	for _, tenant := range []string{"acme", "globex"} {
		conn, err := pgx.Connect(ctx, withDatabase(dsn, tenantDatabases[tenant]))
		if err != nil {
			return "", err
		}
		var c int64
		err = conn.QueryRow(ctx, `SELECT cents FROM example_wallets`).Scan(&c)
		_ = conn.Close(ctx)
		if err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%s %d.%02d", tenant, c/100, c%100))
	}
	var c int64
	if err := shared.QueryRow(ctx, `SELECT cents FROM example_umbrella.example_wallets`).Scan(&c); err != nil {
		return "", err
	}
	return strings.Join(append(parts, fmt.Sprintf("umbrella %d.%02d", c/100, c%100)), ", "), nil
}

// withDatabase returns dsn on another database of the same server.
func withDatabase(dsn, db string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Path = "/" + db
	return u.String()
}

// createPlaces creates each tenant's database or schema with its wallet, from scratch.
func createPlaces(ctx context.Context, shared *pgxpool.Pool) error {
	dropPlaces(shared)
	for _, db := range tenantDatabases {
		if _, err := shared.Exec(ctx, `CREATE DATABASE `+db+` TEMPLATE template0`); err != nil {
			return err
		}
	}
	if _, err := shared.Exec(ctx, `CREATE SCHEMA example_umbrella;
		CREATE TABLE example_umbrella.example_wallets (cents bigint NOT NULL);
		INSERT INTO example_umbrella.example_wallets VALUES (0)`); err != nil {
		return err
	}
	dsn := shared.Config().ConnString()
	for _, db := range tenantDatabases {
		conn, err := pgx.Connect(ctx, withDatabase(dsn, db))
		if err != nil {
			return err
		}
		_, err = conn.Exec(ctx, `CREATE TABLE example_wallets (cents bigint NOT NULL); INSERT INTO example_wallets VALUES (0)`)
		_ = conn.Close(ctx)
		if err != nil {
			return err
		}
	}
	return nil
}

func dropPlaces(shared *pgxpool.Pool) {
	ctx := context.Background()
	for _, db := range tenantDatabases {
		_, _ = shared.Exec(ctx, `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`)
	}
	_, _ = shared.Exec(ctx, `DROP SCHEMA IF EXISTS example_umbrella CASCADE`)
}
