// Package uitest holds what the tests of inboxui share, in this module and in the
// browser tests' nested module: a store of each kind on tables of its own, and the
// rows a page shows, seeded with names that hold HTML and script.
package uitest

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/redisstore"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// Hostile names: a consumer, a key and a topic holding HTML and script, each setting
// window.pwned if a page ran it, and a tenant holding HTML. A page must show them as
// text.
const (
	EvilConsumer = `billing<script>window.pwned=1</script><b>bold</b>`
	EvilKey      = `<img src=x onerror="window.pwned=2">`
	EvilTopic    = `"><script>window.pwned=3</script>`
	EvilTenant   = `<i>evil</i>"'`
	// Tenant is the tenant a TenantStore fixture is seeded in.
	Tenant = "acme"
)

// Store is one store the page is tested on.
type Store struct {
	Name  string
	Store inbox.Store
	// Tenant is the tenant the rows are seeded in (a TenantStore); "" otherwise.
	Tenant string
	// Attempts: the store lists attempts (inbox.AttemptLister); Offsets: it keeps
	// offsets (inbox.OffsetStore).
	Attempts, Offsets bool
}

// Context returns ctx with the store's tenant, if it has one.
func (s Store) Context(ctx context.Context) context.Context {
	if s.Tenant == "" {
		return ctx
	}
	return inbox.ContextWithTenant(ctx, s.Tenant)
}

// Stores opens a store of each kind on fresh tables, dropped when the test ends:
// PostgreSQL (pgx and database/sql), MariaDB (and MySQL when INBOX_MYSQL_DSN is set),
// SQLite, Redis, and a TenantStore with a SQLite file per tenant.
func Stores(t testing.TB) []Store {
	t.Helper()
	var out []Store
	out = append(out, Store{Name: "pgx", Store: pgxStore(t), Attempts: true, Offsets: true})
	for _, d := range sqltest.Databases() {
		store, _ := d.Store(t, d.Open(t))
		name := d.Name
		if d.Dialect == sqltest.Postgres {
			name = "sqlpostgres"
		}
		out = append(out, Store{Name: name, Store: store, Attempts: true, Offsets: true})
	}
	out = append(out,
		Store{Name: "sqlite", Store: SQLite(t, filepath.Join(t.TempDir(), "inbox.db")), Attempts: true, Offsets: true},
		Store{Name: "redis", Store: redisStore(t)},
		Store{Name: "tenants", Store: Tenants(t), Tenant: Tenant, Attempts: true, Offsets: true},
	)
	return out
}

func pgxStore(t testing.TB) inbox.Store {
	t.Helper()
	d := sqltest.Databases()[0]
	pool, err := pgxpool.New(context.Background(), d.DSN)
	if err == nil {
		err = pool.Ping(context.Background())
	}
	if err != nil {
		sqltest.Unavailable(t, "PostgreSQL", d.Variable, err)
	}
	t.Cleanup(pool.Close)
	table := sqltest.Name("inbox")
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+`", "`+table+`_attempts", "`+table+`_offsets"`)
	})
	return store
}

// SQLite opens a sqlitestore on the file at path, with its tables.
func SQLite(t testing.TB, path string) *sqlitestore.Store {
	t.Helper()
	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlitestore.New(db, sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	return store
}

func redisStore(t testing.TB) inbox.Store {
	t.Helper()
	addr := os.Getenv("INBOX_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Ping(context.Background()).Err(); err != nil {
		sqltest.Unavailable(t, "Redis", "INBOX_REDIS_ADDR", err)
	}
	prefix := sqltest.Name("inboxui") + ":"
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	return store
}

// Tenants returns a TenantStore with a SQLite file per tenant: Tenant and EvilTenant.
func Tenants(t testing.TB) *inbox.TenantStore {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{Tenant: "acme.db", EvilTenant: "evil.db"}
	ts, err := inbox.NewTenantStore(inbox.TenantConfig{
		Lookup: func(ctx context.Context, tenant string) (inbox.Tenant, error) {
			file, ok := files[tenant]
			if !ok {
				return inbox.Tenant{}, inbox.ErrUnknownTenant
			}
			return inbox.Tenant{Store: SQLite(t, filepath.Join(dir, file))}, nil
		},
		Tenants: func(context.Context) ([]string, error) { return []string{Tenant, EvilTenant}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ts.Close() })
	return ts
}

// Seeded is what Seed wrote.
type Seeded struct {
	// Keys per consumer.
	Keys map[string]int64
	// Offsets: EvilConsumer's on EvilTopic, partition 0, and billing's on "orders",
	// partition 3, when the store keeps offsets.
	EvilOffset, BillingOffset int64
}

// Seed writes the rows a page shows: three keys of "billing", one of EvilConsumer
// (EvilKey), an attempt of EvilConsumer's whose handler panicked (MaxAttempts: it stays
// unfinished), and, when the store keeps offsets, two offsets, one on EvilTopic.
func Seed(t testing.TB, s Store) Seeded {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.Context(context.Background()), time.Minute)
	defer cancel()
	ib, err := inbox.New(inbox.Config{Store: s.Store, Consumer: "seed", MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	process := func(consumer, key string) {
		if _, err := ib.Process(ctx, consumer, key, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"order-1", "order-2", "order-3"} {
		process("billing", key)
	}
	process(EvilConsumer, EvilKey)
	func() {
		defer func() {
			if r := recover(); r != "handler bug" {
				t.Fatalf("the seeded handler's panic: %v", r)
			}
		}()
		_, _ = ib.Process(ctx, EvilConsumer, EvilKey+"-dead", func(context.Context) error { panic("handler bug") })
	}()
	seeded := Seeded{Keys: map[string]int64{"billing": 3, EvilConsumer: 1}, EvilOffset: 42, BillingOffset: 1000}
	if offsets, ok := s.Store.(inbox.OffsetStore); ok && s.Offsets {
		for _, o := range []struct {
			consumer, topic string
			partition       int32
			next            int64
		}{{EvilConsumer, EvilTopic, 0, seeded.EvilOffset}, {"billing", "orders", 3, seeded.BillingOffset}} {
			if _, err := offsets.SetOffset(ctx, o.consumer, o.topic, o.partition, o.next); err != nil {
				t.Fatal(err)
			}
		}
	}
	return seeded
}
