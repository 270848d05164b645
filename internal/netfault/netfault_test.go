package netfault_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/internal/netfault"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// The injector on the real servers: a fault after the reply leaves the command run and
// the client without its answer; a fault before sending leaves it not run; a statement
// prepared once and executed later by name or id is still found by its text.

func database(t *testing.T, name string) sqltest.Database {
	for _, d := range sqltest.Databases() {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no test database %q", name)
	return sqltest.Database{}
}

// requireReset checks that err is the client's view of a broken connection: the reset
// itself, or how the driver reports it (pgx 5.13 reports a failed read as "conn closed":
// MultiResultReader.NextResult drops the read error and closes the connection first).
func requireReset(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, mysql.ErrInvalidConn) && !errors.Is(err, pgconn.ErrConnClosed) {
		t.Fatalf("want a reset connection, got %v", err)
	}
}

func requireFired(t *testing.T, f *netfault.Fault, want string) {
	t.Helper()
	require.True(t, f.HasFired(), "the fault did not strike")
	require.NoError(t, f.Err())
	require.Contains(t, f.Command(), want)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := database(t, "postgres")
	direct := d.Open(t)
	table := sqltest.Name("netfault")
	_, err := direct.Exec(`CREATE TABLE ` + table + ` (n int)`)
	require.NoError(t, err)
	d.DropAtCleanup(t, direct, table)
	count := func() (n int) {
		require.NoError(t, direct.QueryRow(`SELECT count(*) FROM `+table).Scan(&n))
		return n
	}

	in := netfault.New(netfault.Postgres)
	connect := func() *pgx.Conn {
		cfg, err := pgx.ParseConfig(d.DSN)
		require.NoError(t, err)
		cfg.DialFunc = in.DialContext
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			sqltest.Unavailable(t, "PostgreSQL", d.Variable, err)
		}
		t.Cleanup(func() { _ = conn.Close(ctx) })
		return conn
	}
	insert := `INSERT INTO ` + table + ` (n) VALUES ($1)`

	// A statement pgx prepared and cached: the second run sends only its name.
	conn := connect()
	_, err = conn.Exec(ctx, insert, 1)
	require.NoError(t, err)
	f := in.Arm(netfault.Step{Match: netfault.Contains("INSERT INTO " + table)}, netfault.AfterReply)
	_, err = conn.Exec(ctx, insert, 2)
	requireReset(t, err)
	requireFired(t, f, insert)
	require.Equal(t, 2, count(), "the server ran it")

	f = in.Arm(netfault.Step{Match: netfault.Contains("INSERT INTO " + table)}, netfault.BeforeSend)
	_, err = connect().Exec(ctx, insert, 3)
	requireReset(t, err)
	requireFired(t, f, insert)
	require.Equal(t, 2, count(), "the server never got it")

	// A batch: its three statements end with one Sync, and all of them ran.
	f = in.Arm(netfault.Step{Match: netfault.Contains("VALUES ($1)")}, netfault.AfterReply)
	batch := &pgx.Batch{}
	for n := range 3 {
		batch.Queue(insert, 10+n)
	}
	requireReset(t, connect().SendBatch(ctx, batch).Close())
	requireFired(t, f, insert)
	require.Equal(t, 5, count())

	// After: the COMMIT of the transaction that inserted, not the one before it.
	other, conn := connect(), connect()
	f = in.Arm(netfault.Step{Match: netfault.Equal("commit"), After: netfault.Contains("INSERT INTO " + table)}, netfault.AfterReply)
	require.NoError(t, pgx.BeginFunc(ctx, other, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, `SELECT 1`); return err }))
	require.False(t, f.HasFired())
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, insert, 20)
	require.NoError(t, err)
	err = tx.Commit(ctx)
	requireReset(t, err)
	requireFired(t, f, "commit")
	require.Equal(t, 6, count(), "committed")

	// BeforeNext: a pipeline cut after the struck statement. The server ran it (the
	// sequence, which no rollback undoes, moved once) and never got the next one.
	seq := sqltest.Name("netfault_seq")
	_, err = direct.Exec(`CREATE SEQUENCE ` + seq)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = direct.Exec(`DROP SEQUENCE IF EXISTS ` + seq) })
	f = in.Arm(netfault.Step{Match: netfault.Contains("nextval")}, netfault.BeforeNext)
	batch = &pgx.Batch{}
	batch.Queue(`SELECT nextval('` + seq + `')`)
	batch.Queue(`SELECT nextval('` + seq + `') + 0`)
	requireReset(t, connect().SendBatch(ctx, batch).Close())
	requireFired(t, f, "nextval")
	var last int64
	var called bool
	require.NoError(t, direct.QueryRow(`SELECT last_value, is_called FROM `+seq).Scan(&last, &called))
	require.True(t, called, "the struck statement ran")
	require.Equal(t, int64(1), last, "the statement after it never reached the server")
	require.NoError(t, in.Err())
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := database(t, "mariadb")
	direct := d.Open(t)
	table := sqltest.Name("netfault")
	_, err := direct.Exec("CREATE TABLE `" + table + "` (n INT)")
	require.NoError(t, err)
	d.DropAtCleanup(t, direct, table)
	count := func() (n int) {
		require.NoError(t, direct.QueryRow("SELECT COUNT(*) FROM `"+table+"`").Scan(&n))
		return n
	}

	in := netfault.New(netfault.MySQL)
	cfg, err := mysql.ParseDSN(d.DSN)
	require.NoError(t, err)
	cfg.DialFunc = in.DialContext
	connector, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(connector)
	t.Cleanup(func() { _ = db.Close() })
	insert := "INSERT INTO `" + table + "` (n) VALUES (?)"

	// Without interpolateParams the driver prepares, executes by id, and closes.
	f := in.Arm(netfault.Step{Match: netfault.Contains(insert)}, netfault.AfterReply)
	_, err = db.ExecContext(ctx, insert, 1)
	requireReset(t, err)
	requireFired(t, f, insert)
	require.Equal(t, 1, count(), "the server ran it, and database/sql did not run it again")

	// A statement prepared once, executed twice on the connection that prepared it.
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	stmt, err := conn.PrepareContext(ctx, insert)
	require.NoError(t, err)
	_, err = stmt.ExecContext(ctx, 2)
	require.NoError(t, err)
	f = in.Arm(netfault.Step{Match: netfault.Contains(insert)}, netfault.BeforeSend)
	_, err = stmt.ExecContext(ctx, 3)
	requireReset(t, err)
	requireFired(t, f, insert)
	require.Equal(t, 2, count(), "the server never got it")

	f = in.Arm(netfault.Step{Match: netfault.Equal("COMMIT"), After: netfault.Contains(insert)}, netfault.AfterReply)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, insert, 4)
	require.NoError(t, err)
	requireReset(t, tx.Commit())
	requireFired(t, f, "COMMIT")
	require.Equal(t, 3, count(), "committed")
	require.NoError(t, in.Err())
}

func TestRESP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr := os.Getenv("INBOX_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	direct := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = direct.Close() })
	if err := direct.Ping(ctx).Err(); err != nil {
		sqltest.Unavailable(t, "Redis", "INBOX_REDIS_ADDR", err)
	}
	key := sqltest.Name("netfault")
	t.Cleanup(func() { direct.Del(ctx, key+":a", key+":b", key+":c") })
	in := netfault.New(netfault.RESP)
	client := func(retries int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Dialer: in.DialContext, MaxRetries: retries})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	get := func(k string) string { return direct.Get(ctx, key+k).Val() }

	f := in.Arm(netfault.Step{Match: netfault.Equal("incr " + key + ":a")}, netfault.AfterReply)
	requireReset(t, client(-1).Incr(ctx, key+":a").Err())
	requireFired(t, f, "incr")
	require.Equal(t, "1", get(":a"), "the server ran it")

	// go-redis resends a command whose connection broke: it runs twice.
	f = in.Arm(netfault.Step{Match: netfault.Equal("incr " + key + ":a")}, netfault.AfterReply)
	n, err := client(3).Incr(ctx, key+":a").Result()
	require.NoError(t, err)
	requireFired(t, f, "incr")
	require.EqualValues(t, 3, n)

	f = in.Arm(netfault.Step{Match: netfault.HasPrefix("incr " + key + ":b")}, netfault.BeforeSend)
	requireReset(t, client(-1).Incr(ctx, key+":b").Err())
	requireFired(t, f, "incr")
	require.Empty(t, get(":b"), "the server never got it")

	// A pipeline: the fault on its first command waits for every reply.
	f = in.Arm(netfault.Step{Match: netfault.HasPrefix("incr " + key + ":b")}, netfault.AfterReply)
	_, err = client(-1).Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range []string{":b", ":c", ":c"} {
			p.Incr(ctx, key+k)
		}
		return nil
	})
	requireReset(t, err)
	requireFired(t, f, "incr")
	require.Equal(t, [2]string{"1", "2"}, [2]string{get(":b"), get(":c")})

	f = in.Arm(netfault.Step{Match: netfault.HasPrefix("incr")}, netfault.AfterReply)
	require.True(t, in.Disarm(f))
	require.NoError(t, client(-1).Incr(ctx, key+":b").Err())
	require.False(t, f.HasFired())
	require.False(t, in.Disarm(f))
	require.NoError(t, in.Err(), "every reply followed")
}
