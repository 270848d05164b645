package inbox_test

import (
	"context"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// Replicas that start together, as processes (ADR 133): the test binary, re-executed
// createProcesses times at once, each opening its own store on a fresh table (or a
// TenantStore on fresh schemas), waiting for one moment, then calling CreateSchema and
// inbox.New, as a service's main does. Every process must start.

const (
	createHelperEnv  = "INBOX_CREATE_HELPER"
	createKindEnv    = "INBOX_CREATE_KIND"
	createDSNEnv     = "INBOX_CREATE_DSN"
	createTableEnv   = "INBOX_CREATE_TABLE"
	createAtEnv      = "INBOX_CREATE_AT" // Unix ns: the moment every process calls CreateSchema
	createProcesses  = 6
	createProcRounds = 5
)

// TestCreateSchemaHelper is one replica, in a child process.
func TestCreateSchemaHelper(t *testing.T) {
	if os.Getenv(createHelperEnv) != "1" {
		return // not a child
	}
	ctx := context.Background()
	kind, dsn, table := os.Getenv(createKindEnv), os.Getenv(createDSNEnv), os.Getenv(createTableEnv)
	var (
		store inbox.Store
		done  func()
		err   error
	)
	if kind == "tenants-pgx-schemas" { // table is the tenants' schemas, comma-separated
		store, done, err = openSchemasTenantStore(ctx, dsn, strings.Split(table, ","))
	} else {
		store, done, err = openFleetStore(ctx, kind, dsn, table)
	}
	require.NoError(t, err)
	defer done()
	at, err := strconv.ParseInt(os.Getenv(createAtEnv), 10, 64)
	require.NoError(t, err)
	time.Sleep(time.Until(time.Unix(0, at)))
	require.NoError(t, store.(schemaCreator).CreateSchema(ctx))
	_, err = inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.NoError(t, err)
}

// openSchemasTenantStore is a TenantStore whose tenants are PostgresStores, one per
// schema, on one pool.
func openSchemasTenantStore(ctx context.Context, dsn string, schemas []string) (inbox.Store, func(), error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	ts, err := inbox.NewTenantStore(inbox.TenantConfig{
		Tenants: func(context.Context) ([]string, error) { return schemas, nil },
		Lookup: func(_ context.Context, tenant string) (inbox.Tenant, error) {
			s, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: tenant, SearchPath: true})
			return inbox.Tenant{Store: s}, err
		},
	})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return ts, func() { _ = ts.Close(); pool.Close() }, nil
}

func TestCreateSchemaProcesses(t *testing.T) {
	t.Parallel()
	if os.Getenv(createHelperEnv) == "1" {
		t.Skip("a child")
	}
	kinds := fleetKinds(t)
	kinds["tenants-pgx-schemas"] = postgresDSN()
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, kind := range names {
		t.Run(kind, func(t *testing.T) {
			tries, passes := 0, 0
			for round := range createProcRounds {
				table := createTarget(t, kind, kinds[kind])
				at := time.Now().Add(time.Second).UnixNano() // after every child has started
				outs := make([]string, createProcesses)
				errs := make([]error, createProcesses)
				var wg sync.WaitGroup
				for i := range createProcesses {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cmd := exec.Command(os.Args[0], "-test.run=^TestCreateSchemaHelper$", "-test.count=1")
						cmd.Env = append(os.Environ(), createHelperEnv+"=1", createKindEnv+"="+kind, createDSNEnv+"="+kinds[kind],
							createTableEnv+"="+table, createAtEnv+"="+strconv.FormatInt(at, 10))
						out, err := cmd.CombinedOutput()
						outs[i], errs[i] = string(out), err
					}()
				}
				wg.Wait()
				for i, err := range errs {
					tries++
					if err == nil {
						passes++
					} else {
						t.Errorf("round %d, process %d: %v\n%s", round, i, err, outs[i])
					}
				}
			}
			t.Logf("%s: %d of %d processes started together created the schema and passed inbox.New (%d at once, %d rounds)", kind, passes, tries, createProcesses, createProcRounds)
		})
	}
}

// createTarget returns a fresh table for kind (for the tenants, fresh schemas), dropped
// when the test ends.
func createTarget(t *testing.T, kind, dsn string) string {
	switch kind {
	case "tenants-pgx-schemas":
		return strings.Join(tenantSchemas(t), ",")
	case "sqlite":
		return tableName("created") // the file is the test's: dropped with its directory
	case "pgx", "sqlpostgres":
		table := tableName("created")
		pgDropTables(t, "", table)
		return table
	}
	table := tableName("created")
	variable := map[string]string{"mysql": "INBOX_MYSQL_DSN", "tidb": "INBOX_TIDB_DSN"}[kind]
	if variable == "" {
		variable = "INBOX_MARIADB_DSN"
	}
	admin := openSQL(t, "mysql", dsn, kind, variable)
	t.Cleanup(func() {
		for _, suffix := range inboxTables {
			_, _ = admin.Exec("DROP TABLE IF EXISTS `" + table + suffix + "`")
		}
	})
	return table
}
