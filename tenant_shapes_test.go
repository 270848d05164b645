package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// tenantShape is one way to give each tenant its own place, for the tests across
// tenants: a TenantStore over the test's three tenants, with every tenant's tables
// created, and each tenant's ledger. The ledgers are one table of the same name in every
// tenant's database or schema (a Redis list under the tenant's prefix), so that a write
// routed to the wrong tenant lands there silently and only the balances show it.
type tenantShape struct {
	name string
	open func(t *testing.T) tenantSetup
	// sql: the shape has SQL tables (Verify, CreateSchema and Purge do something).
	sql bool
}

// tenantSetup is a shape opened for one test.
type tenantSetup struct {
	ts      *inbox.TenantStore
	ledgers []ledger
	// drop drops a tenant's inbox tables (SQL shapes), so that its calls fail.
	drop func(t *testing.T, tenant string)
}

func tenantShapes() []tenantShape {
	return []tenantShape{
		{"pgx-databases", openPgDatabasesShape, true},
		{"pgx-schemas", openPgSchemasShape, true},
		{"mariadb-databases", openMariaDatabasesShape, true},
		{"redis-prefixes", openRedisPrefixesShape, false},
	}
}

func openPgDatabasesShape(t *testing.T) tenantSetup {
	ctx := context.Background()
	dbs := pgTenantDatabases(t)
	table, ledgerTable := tableName("inbox"), tableName("ledger")
	ts := newTenantStore(t, func(ctx context.Context, i int) (inbox.Tenant, error) {
		pool, err := newPgxPool(ctx, pgDSNOn(t, dbs[i], nil), nil)
		if err != nil {
			return inbox.Tenant{}, err
		}
		store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
		return inbox.Tenant{Store: store, Close: pool.Close}, err
	})
	require.NoError(t, ts.CreateSchema(ctx))
	var ledgers []ledger
	for _, db := range dbs {
		pool := pgPoolWith(t, pgDSNOn(t, db, nil))
		l := pgLedger{pool: pool, table: pgx.Identifier{ledgerTable}.Sanitize()}
		_, err := pool.Exec(ctx, `CREATE TABLE `+l.table+` (id serial PRIMARY KEY, amount int NOT NULL)`)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+l.table+`, `+pgx.Identifier{table}.Sanitize()+`, `+pgx.Identifier{table + "_attempts"}.Sanitize())
		})
		ledgers = append(ledgers, l)
	}
	drop := func(t *testing.T, tenant string) {
		i, err := tenantIndex(tenant)
		require.NoError(t, err)
		_, err = ledgers[i].(pgLedger).pool.Exec(context.Background(), `DROP TABLE `+pgx.Identifier{table}.Sanitize()+`, `+pgx.Identifier{table + "_attempts"}.Sanitize())
		require.NoError(t, err)
	}
	return tenantSetup{ts, ledgers, drop}
}

func openPgSchemasShape(t *testing.T) tenantSetup {
	ctx := context.Background()
	schemas := tenantSchemas(t)
	pool := pgPoolWith(t, pgDSN(t, nil))
	ts := newTenantStore(t, func(_ context.Context, i int) (inbox.Tenant, error) {
		store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: schemas[i], SearchPath: true})
		return inbox.Tenant{Store: store}, err
	})
	require.NoError(t, ts.CreateSchema(ctx))
	var ledgers []ledger
	for _, s := range schemas {
		l := pgLedger{pool: pool, table: pgx.Identifier{s, "ledger"}.Sanitize(), write: `"ledger"`}
		_, err := pool.Exec(ctx, `CREATE TABLE `+l.table+` (id serial PRIMARY KEY, amount int NOT NULL)`)
		require.NoError(t, err)
		ledgers = append(ledgers, l)
	}
	drop := func(t *testing.T, tenant string) {
		i, err := tenantIndex(tenant)
		require.NoError(t, err)
		_, err = pool.Exec(context.Background(), `DROP TABLE `+pgx.Identifier{schemas[i], "inbox"}.Sanitize()+`, `+pgx.Identifier{schemas[i], "inbox_attempts"}.Sanitize())
		require.NoError(t, err)
	}
	return tenantSetup{ts, ledgers, drop}
}

func openMariaDatabasesShape(t *testing.T) tenantSetup {
	ctx := context.Background()
	dbs := mariaTenantDatabases(t)
	table, ledgerTable := tableName("inbox"), tableName("ledger")
	ts := newTenantStore(t, func(_ context.Context, i int) (inbox.Tenant, error) {
		db, err := sql.Open("mysql", mariaDSNOn(t, dbs[i]))
		if err != nil {
			return inbox.Tenant{}, err
		}
		store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table})
		return inbox.Tenant{Store: store, Close: func() { _ = db.Close() }}, err
	})
	require.NoError(t, ts.CreateSchema(ctx))
	var ledgers []ledger
	for _, name := range dbs {
		db := openSQL(t, "mysql", mariaDSNOn(t, name), "MariaDB", "INBOX_MARIADB_DSN")
		l := sqlLedger{db: db, table: "`" + ledgerTable + "`", insert: "INSERT INTO `" + ledgerTable + "` (amount) VALUES (?)"}
		_, err := db.Exec("CREATE TABLE " + l.table + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, amount INT NOT NULL) ENGINE=InnoDB")
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = db.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %s, `%s`, `%s`", l.table, table, table+"_attempts"))
		})
		ledgers = append(ledgers, l)
	}
	drop := func(t *testing.T, tenant string) {
		i, err := tenantIndex(tenant)
		require.NoError(t, err)
		_, err = ledgers[i].(sqlLedger).db.Exec(fmt.Sprintf("DROP TABLE `%s`, `%s`", table, table+"_attempts"))
		require.NoError(t, err)
	}
	return tenantSetup{ts, ledgers, drop}
}

func openRedisPrefixesShape(t *testing.T) tenantSetup {
	client := redisClient(t)
	prefix := redisPrefix(t, client)
	ts := newTenantStore(t, func(_ context.Context, i int) (inbox.Tenant, error) {
		store, err := redisstore.New(client, redisstore.Config{Prefix: prefix + tenants[i] + ":"})
		return inbox.Tenant{Store: store}, err
	})
	var ledgers []ledger
	for _, tenant := range tenants {
		ledgers = append(ledgers, redisLedger{client: client, key: prefix + tenant + ":ledger"})
	}
	return tenantSetup{ts: ts, ledgers: ledgers}
}

// tenantLedger returns the ledger of the tenant in ctx, for handlers that write per
// tenant (only the Redis shape's differ by name).
func tenantLedger(t testing.TB, ctx context.Context, ledgers []ledger) ledger {
	tenant, ok := inbox.TenantFromContext(ctx)
	require.True(t, ok, "the handler's context carries the tenant")
	i, err := tenantIndex(tenant)
	require.NoError(t, err)
	return ledgers[i]
}
