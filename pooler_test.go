package inbox_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// pgx's default mode, its statement cache, cannot work through PgBouncer in transaction
// mode. New says so with ErrStatementCache and the DSN setting to change, on every handle
// (pool, one connection, database/sql), instead of the raw "prepared statement
// stmtcache_... already exists (SQLSTATE 42P05)"; the modes PgBouncer serves pass, and
// so does the default mode on PostgreSQL directly and through PgBouncer in session mode.

// newOn returns New's error for each handle kind over dsn, on tables that exist: a pool,
// a pool of one, a connection of a pool, a connection, and database/sql's pool, pool of
// one and connection (a pool of one is never waited on: the check opens a second
// connection outside it).
func newOn(t *testing.T, dsn string) map[string]error {
	t.Helper()
	ctx := context.Background()
	table := tableName("inbox")
	newPgxStore(t, pgPool(t), inbox.PostgresConfig{Table: table}) // created directly, dropped at the end
	errs := map[string]error{}
	check := func(name string, store inbox.Store, err error) {
		require.NoError(t, err)
		_, errs[name] = inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	}
	pool := pgPoolWith(t, dsn)
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	check("pool", store, err)
	conn := pgConn(t, dsn)
	store, err = inbox.NewPostgresStore(conn, inbox.PostgresConfig{Table: table})
	check("conn", store, err)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol).Scan(&one), "the check leaves the connection usable")
	store, err = inbox.NewPostgresStore(pgPoolOf(t, dsn, 1), inbox.PostgresConfig{Table: table})
	check("pool of one", store, err)
	pooled, err := pgPoolWith(t, dsn).Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(pooled.Release)
	store, err = inbox.NewPostgresStore(pooled, inbox.PostgresConfig{Table: table})
	check("connection of a pool", store, err)

	db := openSQL(t, "pgx", dsn, "PostgreSQL", "INBOX_PGBOUNCER_DSN")
	sqlStore, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Table: table})
	check("database/sql", sqlStore, err)
	dbOne := openSQL(t, "pgx", dsn, "PostgreSQL", "INBOX_PGBOUNCER_DSN")
	dbOne.SetMaxOpenConns(1)
	sqlStore, err = inbox.NewSQLPostgresStore(dbOne, inbox.SQLPostgresConfig{Table: table})
	check("database/sql pool of one", sqlStore, err)
	sqlConn, err := openSQL(t, "pgx", dsn, "PostgreSQL", "INBOX_PGBOUNCER_DSN").Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqlConn.Close() })
	sqlStore, err = inbox.NewSQLPostgresStore(sqlConn, inbox.SQLPostgresConfig{Table: table})
	check("*sql.Conn", sqlStore, err)
	return errs
}

func TestNewRefusesTheStatementCacheBehindPgBouncer(t *testing.T) {
	t.Parallel()
	for _, settings := range []map[string]string{nil, {"default_query_exec_mode": "cache_statement"}} { // pgx's default
		mode := settings["default_query_exec_mode"]
		errs := newOn(t, pgbouncerDSN(t, settings))
		for handle, err := range errs {
			require.ErrorIs(t, err, inbox.ErrStatementCache, "%s, mode %q", handle, mode)
			require.Contains(t, err.Error(), "default_query_exec_mode=exec", handle)
			require.NotContains(t, err.Error(), "already exists", "%s: the inbox found it before pgx failed", handle)
		}
	}
}

func TestNewAcceptsWhatPgBouncerServes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exec", "simple_protocol", "cache_describe"} {
		for handle, err := range newOn(t, pgbouncerDSN(t, map[string]string{"default_query_exec_mode": mode})) {
			require.NoError(t, err, "%s, mode %s", handle, mode)
		}
	}
}

func TestNewAcceptsTheStatementCacheWithoutATransactionPooler(t *testing.T) {
	t.Parallel()
	for handle, err := range newOn(t, postgresDSN()) {
		require.NoError(t, err, "%s, PostgreSQL directly", handle)
	}
	for handle, err := range newOn(t, sessionPgBouncer(t)) {
		require.NoError(t, err, "%s, PgBouncer in session mode", handle)
	}
}

// A store call that meets the statement cache's failure says what to change too. Two
// pools of pgx's default mode take turns on PgBouncer's server connections, whose
// prepared statements each pool's cache misjudges.
func TestStatementCacheFailureIsExplained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgbouncerDSN(t, nil)
	table := tableName("inbox")
	newPgxStore(t, pgPool(t), inbox.PostgresConfig{Table: table})
	var stores []inbox.Store
	for range 2 {
		s, err := inbox.NewPostgresStore(pgPoolWith(t, dsn), inbox.PostgresConfig{Table: table})
		require.NoError(t, err)
		stores = append(stores, s)
	}
	for i := range 200 {
		_, err := stores[i%2].Forget(ctx, "billing", fmt.Sprint("order-", i))
		if err != nil {
			require.ErrorIs(t, err, inbox.ErrStatementCache)
			require.Contains(t, err.Error(), "default_query_exec_mode=exec")
			return
		}
	}
	t.Fatal("200 calls from two pools of pgx's statement cache through PgBouncer in transaction mode all passed")
}

// pgPoolOf opens a pool of at most maxConns connections to dsn, closed when the test ends.
func pgPoolOf(t *testing.T, dsn string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// sessionPgBouncer starts a PgBouncer of the test's own in session mode on a free port
// (scripts/pgbouncer.sh), stopped when the test ends, and returns its DSN. It needs the
// shared one's INBOX_PGBOUNCER_DSN to be set (the same CI runs both).
func sessionPgBouncer(t *testing.T) string {
	t.Helper()
	pgbouncerDSN(t, nil) // skips where PgBouncer is not tested
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("inbox-pgbouncer-session-%d", port))
	env := append(os.Environ(), fmt.Sprint("PGBOUNCER_PORT=", port), "PGBOUNCER_DIR="+dir, "PGBOUNCER_POOL_MODE=session")
	script := func(arg string) *exec.Cmd {
		cmd := exec.Command("scripts/pgbouncer.sh", arg)
		cmd.Env = env
		return cmd
	}
	out, err := script("start").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = script("stop").Run() })
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", port)
}

// The check runs on New only, and leaves nothing behind: a pool through PgBouncer in
// exec mode still serves as many transactions as before.
func TestPoolerCheckLeavesNoTransactionOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgPoolOf(t, pgbouncerDSN(t, nil), 2)
	table := tableName("inbox")
	newPgxStore(t, pgPool(t), inbox.PostgresConfig{Table: table})
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	require.NoError(t, err)
	_, err = inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.ErrorIs(t, err, inbox.ErrStatementCache)
	for range 2 { // both connections: idle, outside any transaction
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		require.Equal(t, byte('I'), c.Conn().PgConn().TxStatus())
	}
}
