package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
	"github.com/watermill-inbox/inbox/redisstore"
)

// The tenant flavours of the conformance suite: a TenantStore in front of one store per
// tenant, each case running as caseTenant. Every shape the docs describe is here: a
// PostgreSQL database per tenant (a pgx pool each), a schema per tenant on one pool
// (pgx and database/sql; the handler's unqualified statements resolve in the tenant's
// schema), a MariaDB database per tenant, and a Redis key prefix per tenant. The
// ledger exists in caseTenant's database or schema only, so a handler routed elsewhere
// fails instead of passing.

// tenantFlavour returns the tenant flavour named name.
func tenantFlavour(name string) storeFlavour {
	for _, f := range tenantFlavours() {
		if f.name == name {
			return f
		}
	}
	panic("no tenant flavour " + name)
}

func tenantFlavours() []storeFlavour {
	flavours := []storeFlavour{
		{name: "tenants-pgx-databases", tenant: caseTenant, open: pgDatabasesFixture, missing: pgDatabasesMissing, creators: pgDatabasesCreators},
		{name: "tenants-pgx-schemas", tenant: caseTenant, open: pgSchemasFixture(false, directPg), missing: pgSchemasMissing, creators: pgSchemasCreators(false, directPg)},
		{name: "tenants-sqlpostgres-schemas", tenant: caseTenant, open: pgSchemasFixture(true, directPg), missing: pgSchemasMissing, creators: pgSchemasCreators(true, directPg)},
		// The usual SaaS deployment: a schema per tenant on one pool, through PgBouncer in
		// transaction mode (the search_path is the transaction's, on whichever server
		// connection runs it).
		{name: "tenants-pgbouncer-schemas", tenant: caseTenant, open: pgSchemasFixture(false, bouncedPg), missing: pgSchemasMissing, creators: pgSchemasCreators(false, bouncedPg),
			caps: caps{attemptsRefused: true, purgeTurnRefused: inbox.ErrPurgeTurnBehindPooler}},
		{name: "tenants-mariadb-databases", tenant: caseTenant, open: mariaDatabasesFixture, missing: mariaDatabasesMissing, creators: mariaDatabasesCreators},
		{name: "tenants-redis-prefixes", tenant: caseTenant, open: redisPrefixesFixture,
			caps: caps{noJoin: true, noPurge: true, noSchema: true, noSession: true, handlerCannotCommit: true, noAttemptCount: true, noNeighbours: true, noOffsets: true}},
	}
	// TenantStore routes the core Store and every optional ability (AttemptCounter,
	// BatchStore, OffsetStore, ConsumerNeighbours) to the tenant's store: a flavour
	// lacks what its tenants' stores lack.
	return flavours
}

// pgDatabasesFixture: a PostgreSQL database per tenant, each store on a pool of its own
// that Lookup opens and Tenant.Close closes.
func pgDatabasesFixture(t *testing.T, opts storeOpts) fixture {
	ctx := context.Background()
	dbs := pgTenantDatabases(t)
	table := tableName("inbox")
	nf := newNetFaults(opts, netfault.Postgres)
	open := func(t *testing.T) inbox.Store {
		return newTenantStoreOpts(t, opts, func(ctx context.Context, i int) (inbox.Tenant, error) {
			pool, err := newPgxPool(ctx, pgDSNOn(t, dbs[i], nil), nf.dial())
			if err != nil {
				return inbox.Tenant{}, err
			}
			store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table, LockTimeout: opts.lockTimeout})
			if err != nil {
				pool.Close()
				return inbox.Tenant{}, err
			}
			return inbox.Tenant{Store: store, Close: pool.Close}, nil
		})
	}
	store := open(t)
	require.NoError(t, store.(*inbox.TenantStore).CreateSchema(ctx), "CreateSchema creates every tenant's tables")
	pools := make([]*pgxpool.Pool, len(dbs))
	for i, db := range dbs {
		pools[i] = pgPoolWith(t, pgDSNOn(t, db, nil))
		t.Cleanup(func() {
			_, _ = pools[i].Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize()+`, `+pgx.Identifier{table + "_attempts"}.Sanitize())
		})
	}
	b := pools[1]
	caseLedger := newPgLedger(t, b)
	if nf != nil {
		nf.steps = pgFaultSteps(pgFaultTable("", table), caseLedger.table)
	}
	return fixture{
		store: store, handle: pooled, ledger: caseLedger, lock: pgLockProbe, faults: nf,
		peer:       open,
		begin:      pgxBegin(b),
		beginOther: func(t *testing.T) (any, func(bool) error) { return pgxBegin(pgPoolWith(t, pgDSNOn(t, dbs[1], nil)))(t) },
		ledgerIn: ledgersIn(caseLedger, func(t *testing.T, i int) ledger {
			return newPgLedger(t, pools[i]) // a table the case tenant's database lacks
		}),
	}
}

// ledgersIn returns a fixture's ledgerIn: caseTenant's ledger, or another tenant's
// made by other.
func ledgersIn(caseLedger ledger, other func(t *testing.T, i int) ledger) func(t *testing.T, tenant string) ledger {
	return func(t *testing.T, tenant string) ledger {
		i, err := tenantIndex(tenant)
		require.NoError(t, err)
		if tenant == caseTenant {
			return caseLedger
		}
		return other(t, i)
	}
}

// pgDatabasesMissing is a TenantStore whose last tenant's tables are missing.
func pgDatabasesMissing(t *testing.T) inbox.Store {
	dbs := pgTenantDatabases(t)
	table := tableName("missing")
	for _, db := range dbs[:2] {
		newPgxStore(t, pgPoolWith(t, pgDSNOn(t, db, nil)), inbox.PostgresConfig{Table: table})
	}
	return newTenantStore(t, func(ctx context.Context, i int) (inbox.Tenant, error) {
		pool, err := newPgxPool(ctx, pgDSNOn(t, dbs[i], nil), nil)
		if err != nil {
			return inbox.Tenant{}, err
		}
		store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
		return inbox.Tenant{Store: store, Close: pool.Close}, err
	})
}

// directPg and bouncedPg are the DSNs of the schema fixtures: PostgreSQL directly, with
// the suite's session settings, or through PgBouncer in pgx's exec mode.
func directPg(t testing.TB) string { return pgDSN(t, nil) }
func bouncedPg(t testing.TB) string {
	return pgbouncerDSN(t, map[string]string{"default_query_exec_mode": "exec"})
}

// pgSchemasFixture: a schema per tenant on one server, every tenant's store on one
// shared pool on dsn (pgx, or database/sql with viaSQL), with Schema and SearchPath.
// Each schema has the tables "inbox" and "ledger" under the same names; the handler
// credits the unqualified "ledger".
func pgSchemasFixture(viaSQL bool, dsn func(t testing.TB) string) func(t *testing.T, opts storeOpts) fixture {
	return func(t *testing.T, opts storeOpts) fixture {
		ctx := context.Background()
		nf := newNetFaults(opts, netfault.Postgres)
		openDB := func(t testing.TB) *sql.DB {
			d := dsn(t)
			if nf != nil {
				d = pgxDialDSN(t, d, nf.dial())
			}
			return openSQL(t, "pgx", d, "PostgreSQL", "INBOX_POSTGRES_DSN")
		}
		openPool := func(t testing.TB) *pgxpool.Pool { return pgPoolDial(t, dsn(t), nf.dial()) }
		schemas := tenantSchemas(t)
		pool := openPool(t)
		db := openDB(t)
		newStore := func(pool *pgxpool.Pool, db *sql.DB) inbox.Store {
			return newTenantStoreOpts(t, opts, func(_ context.Context, i int) (inbox.Tenant, error) {
				if viaSQL {
					s, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Schema: schemas[i], SearchPath: true, LockTimeout: opts.lockTimeout})
					return inbox.Tenant{Store: s}, err
				}
				s, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: schemas[i], SearchPath: true, LockTimeout: opts.lockTimeout})
				return inbox.Tenant{Store: s}, err
			})
		}
		store := newStore(pool, db)
		require.NoError(t, store.(*inbox.TenantStore).CreateSchema(ctx), "CreateSchema creates every tenant's schema and tables")
		for _, s := range schemas {
			_, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{s, "ledger"}.Sanitize()+` (id serial PRIMARY KEY, amount int NOT NULL)`)
			require.NoError(t, err)
		}
		b := pgx.Identifier{schemas[1]}.Sanitize()
		// An owner's transaction on the tenant sets its search_path, as the store's own do.
		setPath := `SET LOCAL search_path TO ` + b + `, public`
		if nf != nil { // the case tenant's tables, qualified as the stores write them; the handler's ledger unqualified
			nf.steps = pgFaultSteps(pgFaultTable(schemas[1], "inbox"), `"ledger"`)
		}
		fx := fixture{
			store: store, handle: pooled, lock: pgLockProbe, faults: nf,
			ledger: pgLedger{pool: pool, table: b + `."ledger"`, write: `"ledger"`},
			peer:   func(t *testing.T) inbox.Store { return newStore(openPool(t), openDB(t)) },
			begin:  withStatement(pgxBegin(pool), setPath),
			beginOther: func(t *testing.T) (any, func(bool) error) {
				return withStatement(pgxBegin(pgPoolWith(t, dsn(t))), setPath)(t)
			},
		}
		// Every schema has its "ledger": the handler's unqualified name finds the tenant's.
		fx.ledgerIn = ledgersIn(fx.ledger, func(_ *testing.T, i int) ledger {
			return pgLedger{pool: pool, table: pgx.Identifier{schemas[i], "ledger"}.Sanitize(), write: `"ledger"`}
		})
		if viaSQL {
			fx.ledger = sqlLedger{db: db, table: b + `."ledger"`, insert: `INSERT INTO "ledger" (amount) VALUES ($1)`}
			fx.ledgerIn = ledgersIn(fx.ledger, func(_ *testing.T, i int) ledger {
				return sqlLedger{db: db, table: pgx.Identifier{schemas[i], "ledger"}.Sanitize(), insert: `INSERT INTO "ledger" (amount) VALUES ($1)`}
			})
			fx.begin = withStatement(sqlBegin(db), setPath)
			fx.beginOther = func(t *testing.T) (any, func(bool) error) {
				return withStatement(sqlBegin(openDB(t)), setPath)(t)
			}
		}
		return fx
	}
}

// tenantSchemas returns a fresh schema name per tenant, each dropped when the test ends.
func tenantSchemas(t testing.TB) []string {
	pool := pgPool(t)
	var schemas []string
	for range tenants {
		s := tableName("tenant")
		schemas = append(schemas, s)
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{s}.Sanitize()+` CASCADE`)
		})
	}
	return schemas
}

// pgSchemasMissing is a TenantStore on schemas of which the last has no tables.
func pgSchemasMissing(t *testing.T) inbox.Store {
	schemas := tenantSchemas(t)
	pool := pgPoolWith(t, pgDSN(t, nil))
	for _, s := range schemas[:2] {
		store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: s})
		require.NoError(t, err)
		require.NoError(t, store.CreateSchema(context.Background()))
	}
	return newTenantStore(t, func(_ context.Context, i int) (inbox.Tenant, error) {
		s, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: schemas[i], SearchPath: true})
		return inbox.Tenant{Store: s}, err
	})
}

// withStatement runs stmt first in each transaction begin begins.
func withStatement(begin func(t *testing.T) (any, func(bool) error), stmt string) func(t *testing.T) (any, func(bool) error) {
	return func(t *testing.T) (any, func(bool) error) {
		tx, end := begin(t)
		require.NoError(t, execIn(context.Background(), tx, stmt))
		return tx, end
	}
}

// mariaDatabasesFixture: a MariaDB database per tenant, each store on a *sql.DB of its
// own that Lookup opens and Tenant.Close closes.
func mariaDatabasesFixture(t *testing.T, opts storeOpts) fixture {
	ctx := context.Background()
	dbs := mariaTenantDatabases(t)
	table := tableName("inbox")
	nf := newNetFaults(opts, netfault.MySQL)
	open := func(t *testing.T) inbox.Store {
		return newTenantStoreOpts(t, opts, func(_ context.Context, i int) (inbox.Tenant, error) {
			dsn := mariaDSNOn(t, dbs[i])
			if nf != nil {
				dsn = mysqlDialDSN(t, dsn, nf.dial())
			}
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				return inbox.Tenant{}, err
			}
			store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table, LockTimeout: opts.lockTimeout})
			return inbox.Tenant{Store: store, Close: func() { _ = db.Close() }}, err
		})
	}
	store := open(t)
	require.NoError(t, store.(*inbox.TenantStore).CreateSchema(ctx), "CreateSchema creates every tenant's tables")
	handles := make([]*sql.DB, len(dbs))
	for i, name := range dbs {
		handles[i] = openSQL(t, "mysql", mariaDSNOn(t, name), "MariaDB", "INBOX_MARIADB_DSN")
		t.Cleanup(func() {
			_, _ = handles[i].Exec(fmt.Sprintf("DROP TABLE IF EXISTS `%s`, `%s`", table, table+"_attempts"))
		})
	}
	b := handles[1]
	caseLedger := newSQLLedger(t, b, true)
	if nf != nil {
		nf.steps = mysqlFaultSteps(table, caseLedger.table)
	}
	return fixture{
		store: store, handle: pooled, ledger: caseLedger, lock: myLockProbe, faults: nf,
		peer:  open,
		begin: sqlBegin(b),
		beginOther: func(t *testing.T) (any, func(bool) error) {
			return sqlBegin(openSQL(t, "mysql", mariaDSNOn(t, dbs[1]), "MariaDB", "INBOX_MARIADB_DSN"))(t)
		},
		ledgerIn: ledgersIn(caseLedger, func(t *testing.T, i int) ledger { return newSQLLedger(t, handles[i], true) }),
	}
}

// mariaDatabasesMissing is a TenantStore whose last tenant's tables are missing.
func mariaDatabasesMissing(t *testing.T) inbox.Store {
	dbs := mariaTenantDatabases(t)
	table := tableName("missing")
	for _, name := range dbs[:2] {
		newMySQLStore(t, openSQL(t, "mysql", mariaDSNOn(t, name), "MariaDB", "INBOX_MARIADB_DSN"), inbox.MySQLConfig{Table: table})
	}
	return newTenantStore(t, func(_ context.Context, i int) (inbox.Tenant, error) {
		db, err := sql.Open("mysql", mariaDSNOn(t, dbs[i]))
		if err != nil {
			return inbox.Tenant{}, err
		}
		store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table})
		return inbox.Tenant{Store: store, Close: func() { _ = db.Close() }}, err
	})
}

// redisPrefixesFixture: a key prefix per tenant on one Redis client.
//
// The Deduplicator's repository is not routed by tenant (it takes a client and a
// prefix of its own): the tenant flavour declares no dedup step; the Redis flavours
// run it.
func redisPrefixesFixture(t *testing.T, opts storeOpts) fixture {
	nf := newNetFaults(opts, netfault.RESP)
	client := redisClientDial(t, nf.dial())
	prefix := redisPrefix(t, client)
	open := func(t *testing.T) inbox.Store {
		return newTenantStoreOpts(t, opts, func(_ context.Context, i int) (inbox.Tenant, error) {
			store, err := redisstore.New(client, redisstore.Config{Prefix: prefix + tenants[i] + ":", Wait: opts.lockTimeout})
			return inbox.Tenant{Store: store}, err
		})
	}
	store := open(t)
	if nf != nil {
		nf.steps = redisFaultSteps(t, prefix+caseTenant+":", "")
	}
	caseLedger := redisLedger{client: client, key: prefix + caseTenant + ":ledger"}
	return fixture{store: store, ledger: caseLedger, peer: open, faults: nf,
		ledgerIn: ledgersIn(caseLedger, func(_ *testing.T, i int) ledger {
			return redisLedger{client: client, key: prefix + tenants[i] + ":ledger"}
		}),
	}
}
