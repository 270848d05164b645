package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// Tenants under test: three PostgreSQL databases and three MariaDB databases, created
// once per test process (inbox_tenant_<pid>_<n>) and dropped by TestMain when the tests
// end; schemas, created per test. The conformance suite's tenant flavours run every case
// as the middle tenant, through a TenantStore in front of all three.

// tenants are the tenants the fixtures route to; the cases run as tenants[1].
var tenants = []string{"tenant-a", "tenant-b", "tenant-c"}

// caseTenant is the tenant the conformance cases run as.
const caseTenant = "tenant-b"

// context returns the context the flavour's cases run with: with the flavour's tenant.
func (f storeFlavour) context() context.Context {
	if f.tenant == "" {
		return context.Background()
	}
	return inbox.ContextWithTenant(context.Background(), f.tenant)
}

// message returns a message for the flavour's cases, naming its tenant in the metadata
// the middleware reads by default.
func (f storeFlavour) message(uuid string, payload []byte) *message.Message {
	msg := message.NewMessage(uuid, payload)
	if f.tenant != "" {
		msg.Metadata.Set(inbox.DefaultTenantMetadata, f.tenant)
	}
	return msg
}

// tenantIndex returns the index of a known tenant, or an error wrapping
// ErrUnknownTenant.
func tenantIndex(tenant string) (int, error) {
	for i, name := range tenants {
		if name == tenant {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: %q is not one of the test's tenants", inbox.ErrUnknownTenant, tenant)
}

// newTenantStore returns a TenantStore over lookup, listing the test's tenants, closed
// when the test ends.
func newTenantStore(t testing.TB, lookup func(ctx context.Context, i int) (inbox.Tenant, error)) *inbox.TenantStore {
	t.Helper()
	return newTenantStoreOpts(t, storeOpts{}, lookup)
}

// newTenantStoreOpts is newTenantStore with the tenant options of opts: its Lookup runs
// through opts.lookup, with opts.openTimeout.
func newTenantStoreOpts(t testing.TB, opts storeOpts, lookup func(ctx context.Context, i int) (inbox.Tenant, error)) *inbox.TenantStore {
	t.Helper()
	ts, err := inbox.NewTenantStore(inbox.TenantConfig{
		Lookup: func(ctx context.Context, tenant string) (inbox.Tenant, error) {
			open := func() (inbox.Tenant, error) {
				i, err := tenantIndex(tenant)
				if err != nil {
					return inbox.Tenant{}, err
				}
				return lookup(ctx, i)
			}
			if opts.lookup != nil {
				return opts.lookup(ctx, tenant, open)
			}
			return open()
		},
		Tenants:     func(context.Context) ([]string, error) { return tenants, nil },
		OpenTimeout: opts.openTimeout,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ts.Close() })
	return ts
}

// tenantDatabases are the databases of one server, created once per process.
type tenantDatabases struct {
	once  sync.Once
	names []string
	err   error
}

var pgTenantDBs, mariaTenantDBs tenantDatabases

// tenantDatabaseName names database n of this process; staleTenantDatabase reports
// whether name is one of a process that no longer runs.
func tenantDatabaseName(n int) string { return fmt.Sprintf("inbox_tenant_%d_%d", os.Getpid(), n) }

func staleTenantDatabase(name string) bool {
	parts := strings.Split(name, "_")
	if len(parts) != 4 || parts[0] != "inbox" || parts[1] != "tenant" {
		return false
	}
	pid, err := strconv.Atoi(parts[2])
	if err != nil || pid == os.Getpid() {
		return false
	}
	_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
	return os.IsNotExist(err)
}

// get creates the databases with create on first use, after dropping those of
// processes that died before their TestMain could.
func (d *tenantDatabases) get(t testing.TB, what, variable string, admin func(t testing.TB) (exec func(string) error, list func() ([]string, error))) []string {
	t.Helper()
	exec, list := admin(t)
	d.once.Do(func() {
		existing, err := list()
		if err != nil {
			d.err = err
			return
		}
		for _, name := range existing {
			if staleTenantDatabase(name) {
				_ = exec("DROP DATABASE IF EXISTS " + name)
			}
		}
		for n := range tenants {
			name := tenantDatabaseName(n + 1)
			if d.err = exec("CREATE DATABASE " + name); d.err != nil {
				return
			}
			d.names = append(d.names, name)
		}
	})
	if d.err != nil {
		unavailable(t, what, variable, d.err)
	}
	return d.names
}

// pgTenantDatabases returns the three PostgreSQL tenant databases.
func pgTenantDatabases(t testing.TB) []string {
	return pgTenantDBs.get(t, "PostgreSQL (creating the tenant databases)", "INBOX_POSTGRES_DSN", func(t testing.TB) (func(string) error, func() ([]string, error)) {
		pool := pgPool(t)
		exec := func(stmt string) error {
			_, err := pool.Exec(context.Background(), stmt+pgTemplate(stmt))
			return err
		}
		list := func() ([]string, error) {
			rows, err := pool.Query(context.Background(), `SELECT datname FROM pg_database WHERE datname LIKE 'inbox\_tenant\_%'`)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[string])
		}
		return exec, list
	})
}

// pgTemplate makes CREATE DATABASE copy template0, which no session holds open (a
// concurrent session on template1 would make it fail).
func pgTemplate(stmt string) string {
	if strings.HasPrefix(stmt, "CREATE DATABASE") {
		return " TEMPLATE template0"
	}
	return ""
}

// mariaTenantDatabases returns the three MariaDB tenant databases.
func mariaTenantDatabases(t testing.TB) []string {
	return mariaTenantDBs.get(t, "MariaDB (creating the tenant databases)", "INBOX_MARIADB_DSN", func(t testing.TB) (func(string) error, func() ([]string, error)) {
		db := mariaDB(t)
		exec := func(stmt string) error { _, err := db.Exec(stmt); return err }
		list := func() ([]string, error) {
			rows, err := db.Query(`SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'inbox\_tenant\_%'`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var names []string
			for rows.Next() {
				var name string
				if err := rows.Scan(&name); err != nil {
					return nil, err
				}
				names = append(names, name)
			}
			return names, rows.Err()
		}
		return exec, list
	})
}

// dropTenantDatabases drops the databases this process created; TestMain calls it.
func dropTenantDatabases() {
	drop := func(names []string, open func() (*sql.DB, error)) {
		if len(names) == 0 {
			return
		}
		db, err := open()
		if err != nil {
			return
		}
		defer db.Close()
		for _, name := range names {
			_, _ = db.Exec("DROP DATABASE IF EXISTS " + name)
		}
	}
	drop(pgTenantDBs.names, func() (*sql.DB, error) { return sql.Open("pgx", postgresDSN()) })
	drop(mariaTenantDBs.names, func() (*sql.DB, error) { return sql.Open("mysql", mariaDBDSN()) })
}

// pgDSNOn is pgDSN (session settings included) on database db.
func pgDSNOn(t testing.TB, db string, settings map[string]string) string {
	t.Helper()
	u, err := url.Parse(pgDSN(t, settings))
	require.NoError(t, err)
	u.Path = "/" + db
	return u.String()
}

// mariaDSNOn is the MariaDB test DSN, with the suite's session lock bound, on database db.
func mariaDSNOn(t testing.TB, db string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(withDSNParams(t, mariaDBDSN(), map[string]string{"innodb_lock_wait_timeout": mySessionLock}))
	require.NoError(t, err)
	cfg.DBName = db
	return cfg.FormatDSN()
}

// newPgxPool opens a pool on dsn for a tenant store (closed by Tenant.Close), dialling
// through dial unless it is nil.
func newPgxPool(ctx context.Context, dsn string, dial dialFunc) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 8
	if dial != nil {
		cfg.ConnConfig.DialFunc = dial
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
