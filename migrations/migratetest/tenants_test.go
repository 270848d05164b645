package migratetest

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// The migrations applied per tenant: three tenants, a schema each on PostgreSQL (the
// tool's DSN sets search_path, so the unqualified migration files land in the schema,
// its version table too) and a database each on MariaDB and MySQL. A TenantStore's
// ForEachTenant drives the tool over the tenant list; New then verifies every tenant's
// tables through it, and each tenant's catalog is what schema/*.sql creates.
func TestMigrationsPerTenant(t *testing.T) {
	t.Parallel()
	for _, d := range sqltest.Databases() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			refName, refDSN := d.Isolated(t)
			refDB := d.OpenDSN(t, refDSN)
			createSchema(t, d, refDB)
			want := readCatalog(t, d, refDB, refName)

			for _, tl := range tools {
				if tl.name == "atlas" {
					continue // it inspects the whole catalog: a database of its own each (TestMigrations)
				}
				t.Run(tl.name, func(t *testing.T) {
					t.Parallel()
					type place struct {
						name, dsn string
						db        *sql.DB
					}
					places := map[string]place{}
					names := []string{"acme", "globex", "initech"}
					for _, tenant := range names {
						name, dsn := d.Isolated(t)
						places[tenant] = place{name, dsn, d.OpenDSN(t, dsn)}
					}
					ts, err := inbox.NewTenantStore(inbox.TenantConfig{
						Lookup: func(_ context.Context, tenant string) (inbox.Tenant, error) {
							p, ok := places[tenant]
							if !ok {
								return inbox.Tenant{}, inbox.ErrUnknownTenant
							}
							var store inbox.Store
							var err error
							if d.Dialect == sqltest.MySQL {
								store, err = inbox.NewMySQLStore(p.db, inbox.MySQLConfig{})
							} else {
								store, err = inbox.NewSQLPostgresStore(p.db, inbox.SQLPostgresConfig{Schema: p.name, SearchPath: true})
							}
							return inbox.Tenant{Store: store}, err
						},
						Tenants: func(context.Context) ([]string, error) { return names, nil },
					})
					require.NoError(t, err)
					t.Cleanup(func() { _ = ts.Close() })
					_, err = inbox.New(inbox.Config{Store: ts, Consumer: "billing"})
					require.ErrorIs(t, err, inbox.ErrNoTable, "no tenant is migrated yet")

					var mu sync.Mutex // the tools' test helpers are not for concurrent use
					require.NoError(t, ts.ForEachTenant(ctx, func(_ context.Context, tenant string, _ inbox.Store) error {
						mu.Lock()
						defer mu.Unlock()
						return tl.up(t, d, places[tenant].dsn)
					}))
					_, err = inbox.New(inbox.Config{Store: ts, Consumer: "billing"})
					require.NoError(t, err, "every tenant's tables are there")
					for _, tenant := range names {
						p := places[tenant]
						require.Equal(t, want, readCatalog(t, d, p.db, p.name), "%s's tables are what schema/*.sql makes", tenant)
					}

					// One tenant migrated down: New names it.
					require.NoError(t, tl.down(t, d, places["globex"].dsn))
					_, err = inbox.New(inbox.Config{Store: ts, Consumer: "billing"})
					require.ErrorIs(t, err, inbox.ErrNoTable)
					require.ErrorContains(t, err, `tenant "globex"`)
					require.NotContains(t, err.Error(), `tenant "acme"`)
				})
			}
		})
	}
}
