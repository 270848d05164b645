package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The commands over a tenant list: two tenants in schemas of the test PostgreSQL and one
// in MariaDB, with a table of one name in each.

type tenantTables struct {
	file, table string
	insert      map[string]func(t *testing.T, consumer string, n int, age time.Duration)
	count       map[string]func(t *testing.T) int
	drop        map[string]func(t *testing.T)
}

func openTenantTables(t *testing.T) tenantTables {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, postgresDSN())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
	}
	t.Cleanup(pool.Close)
	my, err := sql.Open("mysql", mariaDBDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = my.Close() })
	if err := my.PingContext(ctx); err != nil {
		unavailable(t, "MariaDB", "INBOX_MARIADB_DSN", err)
	}
	tt := tenantTables{table: fmt.Sprintf("cli_%08x", rand.Uint32()),
		insert: map[string]func(*testing.T, string, int, time.Duration){}, count: map[string]func(*testing.T) int{}, drop: map[string]func(*testing.T){}}
	var lines []string
	for _, tenant := range []string{"acme", "globex"} {
		schema := fmt.Sprintf("cli_%s_%08x", tenant, rand.Uint32())
		store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: schema, Table: tt.table})
		require.NoError(t, err)
		require.NoError(t, store.CreateSchema(ctx))
		t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
		quoted := pgx.Identifier{schema, tt.table}.Sanitize()
		tt.insert[tenant] = func(t *testing.T, consumer string, n int, age time.Duration) {
			_, err := pool.Exec(context.Background(), `INSERT INTO `+quoted+` (consumer, key, processed_at)
				SELECT $1, $1 || '-' || i, now() - $2::interval FROM generate_series(1, $3) i`, consumer, age, n)
			require.NoError(t, err)
		}
		tt.count[tenant] = func(t *testing.T) int {
			var n int
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+quoted).Scan(&n))
			return n
		}
		tt.drop[tenant] = func(t *testing.T) {
			_, err := pool.Exec(context.Background(), `DROP TABLE `+quoted)
			require.NoError(t, err)
		}
		lines = append(lines, fmt.Sprintf("%s %s %s", tenant, postgresDSN(), schema))
	}
	myStore, err := inbox.NewMySQLStore(my, inbox.MySQLConfig{Table: tt.table})
	require.NoError(t, err)
	require.NoError(t, myStore.CreateSchema(ctx))
	t.Cleanup(func() {
		_, _ = my.Exec(fmt.Sprintf("DROP TABLE IF EXISTS `%s`, `%s_attempts`, `%s_offsets`, `%s_schema`", tt.table, tt.table, tt.table, tt.table))
	})
	tt.insert["initech"] = func(t *testing.T, consumer string, n int, age time.Duration) {
		at := time.Now().UTC().Add(-age).Format("2006-01-02 15:04:05.000000")
		for i := 1; i <= n; i++ {
			_, err := my.Exec("INSERT INTO `"+tt.table+"` (`consumer`, `key`, `processed_at`) VALUES (?, ?, ?)", consumer, fmt.Sprintf("%s-%d", consumer, i), at)
			require.NoError(t, err)
		}
	}
	tt.count["initech"] = func(t *testing.T) int {
		var n int
		require.NoError(t, my.QueryRow("SELECT COUNT(*) FROM `"+tt.table+"`").Scan(&n))
		return n
	}
	lines = append(lines, "# MariaDB: the database is the DSN's", "initech "+mariaDBDSN(), "")
	tt.file = filepath.Join(t.TempDir(), "tenants")
	require.NoError(t, os.WriteFile(tt.file, []byte(strings.Join(lines, "\n")), 0o600))
	return tt
}

func TestTenantList(t *testing.T) {
	t.Parallel()
	tt := openTenantTables(t)
	for i, tenant := range []string{"acme", "globex", "initech"} {
		tt.insert[tenant](t, "billing", i+1, 50*time.Hour) // old
		tt.insert[tenant](t, "fresh", 1, time.Minute)
	}

	res := inboxCLI(t, "stats", "--tenants", tt.file, "--table", tt.table, "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var stats struct {
		Keys    int64
		Tenants []struct {
			Tenant string
			Keys   int64
		}
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &stats))
	require.EqualValues(t, 9, stats.Keys)
	require.Len(t, stats.Tenants, 3)
	for i, want := range []struct {
		tenant string
		keys   int64
	}{{"acme", 2}, {"globex", 3}, {"initech", 4}} {
		require.Equal(t, want.tenant, stats.Tenants[i].Tenant)
		require.Equal(t, want.keys, stats.Tenants[i].Keys)
	}
	res = inboxCLI(t, "stats", "--tenants", tt.file, "--table", tt.table)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, []string{"TENANT", "CONSUMER", "KEYS", "OLDEST", "AGE"}, strings.Fields(strings.Split(res.stdout, "\n")[0]))

	// forget: in the named tenant only.
	res = inboxCLI(t, "forget", "--tenants", tt.file, "--tenant", "globex", "--table", tt.table, "--consumer", "billing", "--key", "billing-1")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, 2, tt.count["globex"](t), "3 keys, one forgotten")
	require.Equal(t, 2, tt.count["acme"](t))
	requireOneLineError(t, inboxCLI(t, "forget", "--tenants", tt.file, "--tenant", "hooli", "--table", tt.table, "--consumer", "billing", "--key", "billing-1"),
		exitFail, `tenant "hooli"`, "unknown tenant")

	// purge --dry-run: every tenant counted, nothing deleted.
	res = inboxCLI(t, "purge", "--tenants", tt.file, "--table", tt.table, "--older-than", "24h", "--min-retention", "24h", "--dry-run")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?s)^TENANT +WOULD DELETE +ATTEMPTS +ERROR\nacme +1 +0 +\nglobex +1 +0 +\ninitech +3 +0 +\nwould delete 5 keys and 0 attempt rows`, res.stdout)
	require.Equal(t, 2, tt.count["globex"](t), "a dry run deletes nothing")

	// purge: every tenant, one result each.
	res = inboxCLI(t, "purge", "--tenants", tt.file, "--table", tt.table, "--older-than", "24h", "--min-retention", "24h", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var purged struct {
		Deleted int64
		Tenants []struct {
			Tenant  string
			Deleted int64
			Error   string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &purged))
	require.EqualValues(t, 5, purged.Deleted, "acme 1, globex 1 (one forgotten), initech 3")
	for _, tenant := range []string{"acme", "globex", "initech"} {
		require.Equal(t, 1, tt.count[tenant](t), "%s keeps its fresh key", tenant)
	}

	// A tenant that fails does not stop the others; the run fails, naming it.
	tt.insert["acme"](t, "billing", 2, 50*time.Hour)
	tt.insert["initech"](t, "billing", 2, 50*time.Hour)
	tt.drop["globex"](t)
	res = inboxCLI(t, "purge", "--tenants", tt.file, "--table", tt.table, "--older-than", "24h", "--min-retention", "24h")
	require.Equal(t, exitFail, res.code, res.stdout)
	require.Equal(t, 1, strings.Count(res.stderr, "\n"), "one line on stderr: %q", res.stderr)
	require.Contains(t, res.stderr, "1 of 3 tenants (globex)")
	require.Contains(t, res.stdout, "deleted 4 keys")
	require.Equal(t, 1, tt.count["acme"](t))
	require.Equal(t, 1, tt.count["initech"](t))

	// Usage.
	for _, args := range [][]string{
		{"stats", "--tenants", tt.file, "--dsn", postgresDSN()},
		{"stats", "--tenants", tt.file, "--schema", "x"},
		{"forget", "--tenants", tt.file, "--consumer", "billing", "--key", "k"},
		{"forget", "--dsn", postgresDSN(), "--tenant", "acme", "--consumer", "billing", "--key", "k"},
	} {
		requireOneLineError(t, inboxCLI(t, args...), exitUsage)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	require.NoError(t, os.WriteFile(bad, []byte("acme\nacme "+postgresDSN()+"\n"), 0o600))
	requireOneLineError(t, inboxCLI(t, "stats", "--tenants", bad), exitUsage, "line 1", `"TENANT DSN [SCHEMA]"`)
}
