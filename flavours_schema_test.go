package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// The flavours' creators (storeFlavour.creators): n stores on one fresh table, each
// over a handle of its own (a pool, a *sql.DB, or a connection of its own for the
// flavours that run on one), none of which created the tables yet.

// inboxTables are the suffixes of the tables a store's CreateSchema creates.
var inboxTables = []string{"", "_attempts", "_offsets", "_schema"}

// pgDropTables drops table's tables (in schema, unless empty) when the test ends.
func pgDropTables(t testing.TB, schema, table string) {
	admin := pgPool(t)
	t.Cleanup(func() {
		for _, suffix := range inboxTables {
			name := pgx.Identifier{table + suffix}
			if schema != "" {
				name = pgx.Identifier{schema, table + suffix}
			}
			_, _ = admin.Exec(context.Background(), `DROP TABLE IF EXISTS `+name.Sanitize())
		}
	})
}

func pgxCreators(dsn func(t testing.TB) string, handle handleKind) func(t *testing.T, n int) []inbox.Store {
	return func(t *testing.T, n int) []inbox.Store {
		table := tableName("created")
		pgDropTables(t, "", table)
		stores := make([]inbox.Store, n)
		for i := range stores {
			var db inbox.PgxDB = pgPoolWith(t, dsn(t))
			if handle == onePgxConn {
				db = pgConn(t, dsn(t))
			}
			s, err := inbox.NewPostgresStore(db, inbox.PostgresConfig{Table: table})
			require.NoError(t, err)
			stores[i] = s
		}
		return stores
	}
}

func sqlPostgresCreators(open sqlOpener, handle handleKind) func(t *testing.T, n int) []inbox.Store {
	return func(t *testing.T, n int) []inbox.Store {
		table := tableName("created")
		pgDropTables(t, "", table)
		stores := make([]inbox.Store, n)
		for i := range stores {
			s, err := inbox.NewSQLPostgresStore(sqlHandle(t, open(t, nil), handle), inbox.SQLPostgresConfig{Table: table})
			require.NoError(t, err)
			stores[i] = s
		}
		return stores
	}
}

// sqlHandle is db, or one of its connections for the one-connection flavours.
func sqlHandle(t testing.TB, db *sql.DB, handle handleKind) inbox.SQLDB {
	if handle == oneSQLConn {
		return sqlConn(t, db)
	}
	return db
}

func mysqlCreators(open sqlOpener, handle handleKind, cfg inbox.MySQLConfig) func(t *testing.T, n int) []inbox.Store {
	return func(t *testing.T, n int) []inbox.Store {
		cfg := cfg
		cfg.Table = tableName("created")
		admin := open(t, nil)
		t.Cleanup(func() {
			for _, suffix := range inboxTables {
				_, _ = admin.Exec("DROP TABLE IF EXISTS `" + cfg.Table + suffix + "`")
			}
		})
		stores := make([]inbox.Store, n)
		for i := range stores {
			s, err := inbox.NewMySQLStore(sqlHandle(t, open(t, nil), handle), cfg)
			require.NoError(t, err)
			stores[i] = s
		}
		return stores
	}
}

func sqliteCreators(d sqliteDriver, handle handleKind) func(t *testing.T, n int) []inbox.Store {
	return func(t *testing.T, n int) []inbox.Store {
		path := sqlitePath(t, d) // a fresh file: dropped with the test's directory
		table := tableName("created")
		stores := make([]inbox.Store, n)
		for i := range stores {
			s, err := sqlitestore.New(sqlHandle(t, sqliteDB(t, d, path), handle), sqlitestore.Config{Table: table})
			require.NoError(t, err)
			stores[i] = s
		}
		return stores
	}
}

// pgSchemasCreators: n TenantStores, each on a pool (or *sql.DB) of its own, over one
// set of fresh schemas, one per tenant.
func pgSchemasCreators(viaSQL bool, dsn func(t testing.TB) string) func(t *testing.T, n int) []inbox.Store {
	return func(t *testing.T, n int) []inbox.Store {
		schemas := tenantSchemas(t)
		stores := make([]inbox.Store, n)
		for i := range stores {
			pool, db := pgPoolWith(t, dsn(t)), openSQL(t, "pgx", dsn(t), "PostgreSQL", "INBOX_POSTGRES_DSN")
			stores[i] = newTenantStore(t, func(_ context.Context, i int) (inbox.Tenant, error) {
				if viaSQL {
					s, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Schema: schemas[i], SearchPath: true})
					return inbox.Tenant{Store: s}, err
				}
				s, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: schemas[i], SearchPath: true})
				return inbox.Tenant{Store: s}, err
			})
		}
		return stores
	}
}

// pgDatabasesCreators: n TenantStores over the tenants' databases, a fresh table.
func pgDatabasesCreators(t *testing.T, n int) []inbox.Store {
	dbs := pgTenantDatabases(t)
	table := tableName("created")
	for _, db := range dbs {
		admin := pgPoolWith(t, pgDSNOn(t, db, nil))
		t.Cleanup(func() {
			for _, suffix := range inboxTables {
				_, _ = admin.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{table + suffix}.Sanitize())
			}
		})
	}
	stores := make([]inbox.Store, n)
	for i := range stores {
		stores[i] = newTenantStore(t, func(ctx context.Context, i int) (inbox.Tenant, error) {
			pool, err := newPgxPool(ctx, pgDSNOn(t, dbs[i], nil), nil)
			if err != nil {
				return inbox.Tenant{}, err
			}
			store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
			return inbox.Tenant{Store: store, Close: pool.Close}, err
		})
	}
	return stores
}

// mariaDatabasesCreators: n TenantStores over the tenants' MariaDB databases, a fresh
// table.
func mariaDatabasesCreators(t *testing.T, n int) []inbox.Store {
	dbs := mariaTenantDatabases(t)
	table := tableName("created")
	for _, name := range dbs {
		admin := openSQL(t, "mysql", mariaDSNOn(t, name), "MariaDB", "INBOX_MARIADB_DSN")
		t.Cleanup(func() {
			for _, suffix := range inboxTables {
				_, _ = admin.Exec(fmt.Sprintf("DROP TABLE IF EXISTS `%s`", table+suffix))
			}
		})
	}
	stores := make([]inbox.Store, n)
	for i := range stores {
		stores[i] = newTenantStore(t, func(_ context.Context, i int) (inbox.Tenant, error) {
			db, err := sql.Open("mysql", mariaDSNOn(t, dbs[i]))
			if err != nil {
				return inbox.Tenant{}, err
			}
			store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table})
			return inbox.Tenant{Store: store, Close: func() { _ = db.Close() }}, err
		})
	}
	return stores
}
