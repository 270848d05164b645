package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The tests build the inbox binary once and run it, against the real PostgreSQL.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "inbox-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "inbox")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the inbox binary: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run of the binary did.
type result struct {
	code           int
	stdout, stderr string
}

// inboxCLI runs the built binary with args, with INBOX_DSN and KAFKA_BROKERS unset.
func inboxCLI(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), "INBOX_DSN=", "KAFKA_BROKERS=") // tests pass --dsn and --brokers
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	if exit, ok := err.(*exec.ExitError); ok {
		res.code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return res
}

// requireOneLineError checks a failed run: the exit status, and one line on stderr.
func requireOneLineError(t *testing.T, res result, code int, contains ...string) {
	t.Helper()
	require.Equal(t, code, res.code, "stderr: %s", res.stderr)
	require.Empty(t, res.stdout)
	require.True(t, strings.HasSuffix(res.stderr, "\n"), "stderr: %q", res.stderr)
	require.Equal(t, 1, strings.Count(res.stderr, "\n"), "one line on stderr: %q", res.stderr)
	for _, c := range contains {
		require.Contains(t, res.stderr, c)
	}
}

func postgresDSN() string {
	if dsn := os.Getenv("INBOX_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func mariaDBDSN() string {
	if dsn := os.Getenv("INBOX_MARIADB_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/test"
}

// unavailable fails the test under CI and skips it elsewhere.
func unavailable(t *testing.T, what, variable string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable (set %s): %v", what, variable, err)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// testDB is a database the binary runs against, with inbox tables of a fresh name,
// dropped when the test ends.
type testDB struct {
	dsn   string // as the binary takes it
	table string
	// insert inserts n keys of consumer processed age ago.
	insert func(t *testing.T, consumer string, n int, age time.Duration)
	count  func(t *testing.T) int
}

// database opens one of the test databases by name: postgres, mariadb (go-sql-driver DSN),
// mariadb-url (mysql:// DSN), mysql (only when INBOX_MYSQL_DSN is set).
type database struct {
	name string
	open func(t *testing.T) testDB
}

func databases() []database {
	mysqlLike := func(what, variable string, dsn func() string, asURL bool) func(t *testing.T) testDB {
		return func(t *testing.T) testDB {
			return openMySQLTable(t, what, variable, dsn(), asURL)
		}
	}
	return []database{
		{name: "postgres", open: openPostgresTable},
		{name: "mariadb", open: mysqlLike("MariaDB", "INBOX_MARIADB_DSN", mariaDBDSN, false)},
		{name: "mariadb-url", open: mysqlLike("MariaDB", "INBOX_MARIADB_DSN", mariaDBDSN, true)},
		{name: "mysql", open: func(t *testing.T) testDB {
			dsn := os.Getenv("INBOX_MYSQL_DSN")
			if dsn == "" {
				t.Skip("MySQL not tested: set INBOX_MYSQL_DSN (e.g. root@tcp(127.0.0.1:3307)/test)")
			}
			return openMySQLTable(t, "MySQL", "INBOX_MYSQL_DSN", dsn, false)
		}},
		// The CLI has no engine flag: it asks the server (inbox.MySQLEngineOf).
		{name: "tidb", open: func(t *testing.T) testDB {
			dsn := os.Getenv("INBOX_TIDB_DSN")
			if dsn == "" {
				t.Skip("TiDB not tested: set INBOX_TIDB_DSN (e.g. root@tcp(127.0.0.1:4000)/test)")
			}
			return openMySQLTable(t, "TiDB", "INBOX_TIDB_DSN", dsn, false)
		}},
		{name: "sqlite", open: openSQLiteTable("sqlite:")},       // sqlite_test.go
		{name: "sqlite-path", open: openSQLiteTable("")},         // a bare path ending in .db
		{name: "sqlite-url", open: openSQLiteTable("sqlite://")}, // sqlite:///abs/path
	}
}

func openPostgresTable(t *testing.T) testDB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, postgresDSN())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
	}
	t.Cleanup(pool.Close)
	table := fmt.Sprintf("cli_%08x", rand.Uint32())
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(ctx))
	quoted := pgx.Identifier{table}.Sanitize()
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+quoted+`, `+pgx.Identifier{table + "_attempts"}.Sanitize()+`, `+pgx.Identifier{table + "_offsets"}.Sanitize()+`, `+pgx.Identifier{table + "_schema"}.Sanitize())
	})
	return testDB{
		dsn:   postgresDSN(),
		table: table,
		insert: func(t *testing.T, consumer string, n int, age time.Duration) {
			_, err := pool.Exec(context.Background(),
				`INSERT INTO `+quoted+` (consumer, key, processed_at)
				 SELECT $1, $1 || '-' || i, now() - $2::interval FROM generate_series(1, $3) i`, consumer, age, n)
			require.NoError(t, err)
		},
		count: func(t *testing.T) int {
			var n int
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+quoted).Scan(&n))
			return n
		},
	}
}

func openMySQLTable(t *testing.T, what, variable, dsn string, asURL bool) testDB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		unavailable(t, what, variable, err)
	}
	table := fmt.Sprintf("cli_%08x", rand.Uint32())
	engine, err := inbox.MySQLEngineOf(ctx, db)
	require.NoError(t, err)
	store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table, Engine: engine})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(ctx))
	t.Cleanup(func() {
		_, _ = db.Exec(fmt.Sprintf("DROP TABLE IF EXISTS `%s`, `%s_attempts`, `%s_offsets`, `%s_schema`", table, table, table, table))
	})
	if asURL {
		dsn = "mysql://" + dsn
	}
	return testDB{
		dsn:   dsn,
		table: table,
		insert: func(t *testing.T, consumer string, n int, age time.Duration) {
			at := time.Now().UTC().Add(-age).Format("2006-01-02 15:04:05.000000")
			for i := 1; i <= n; i++ {
				_, err := db.Exec("INSERT INTO `"+table+"` (`consumer`, `key`, `processed_at`) VALUES (?, ?, ?)", consumer, fmt.Sprintf("%s-%d", consumer, i), at)
				require.NoError(t, err)
			}
		},
		count: func(t *testing.T) int {
			var n int
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM `"+table+"`").Scan(&n))
			return n
		},
	}
}

func TestSchema(t *testing.T) {
	t.Parallel()
	pgFile, err := os.ReadFile("../../schema/postgres.sql")
	require.NoError(t, err)
	myFile, err := os.ReadFile("../../schema/mysql.sql")
	require.NoError(t, err)
	pgRenamed, err := inbox.PostgresSchema("orders_inbox")
	require.NoError(t, err)
	myRenamed, err := inbox.MySQLSchema("orders_inbox")
	require.NoError(t, err)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "postgres, default table", args: []string{"schema", "postgres"}, want: string(pgFile)},
		{name: "postgres, named table", args: []string{"schema", "postgres", "--table", "orders_inbox"}, want: pgRenamed},
		{name: "flags before the database", args: []string{"schema", "--table", "orders_inbox", "postgresql"}, want: pgRenamed},
		{name: "mysql, default table", args: []string{"schema", "mysql"}, want: string(myFile)},
		{name: "mariadb is mysql", args: []string{"schema", "mariadb", "--table", "orders_inbox"}, want: myRenamed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := inboxCLI(t, tt.args...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Equal(t, tt.want, res.stdout)
			require.Empty(t, res.stderr)
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		contains string
	}{
		{name: "unknown command", args: []string{"vacuum"}, contains: `unknown command "vacuum"`},
		{name: "unknown database", args: []string{"schema", "oracle"}, contains: `unknown database "oracle"`},
		{name: "no database", args: []string{"schema"}, contains: "name one database"},
		{name: "purge without age", args: []string{"purge", "--dsn", postgresDSN()}, contains: "--older-than is required"},
		{name: "purge without DSN", args: []string{"purge", "--older-than", "720h"}, contains: "--dsn is required"},
		{name: "bad duration", args: []string{"purge", "--older-than", "a month"}, contains: "invalid value"},
		{name: "json and quiet", args: []string{"purge", "--dsn", postgresDSN(), "--older-than", "720h", "--json", "--quiet"}, contains: "exclude each other"},
		{name: "dry run and quiet", args: []string{"purge", "--dsn", postgresDSN(), "--older-than", "720h", "--dry-run", "--quiet"}, contains: "--dry-run and --quiet exclude each other"},
		{name: "forget without key", args: []string{"forget", "--dsn", postgresDSN(), "--consumer", "c"}, contains: "--key required"},
		{name: "stray argument", args: []string{"stats", "--dsn", postgresDSN(), "extra"}, contains: `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireOneLineError(t, inboxCLI(t, tt.args...), exitUsage, tt.contains)
		})
	}

	t.Run("no arguments prints the usage", func(t *testing.T) {
		res := inboxCLI(t)
		require.Equal(t, exitUsage, res.code)
		require.Contains(t, res.stderr, "Usage:")
	})
	for _, args := range [][]string{{"--help"}, {"purge", "--help"}, {"schema", "-h"}, {"stats", "--help"}, {"forget", "--help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			res := inboxCLI(t, args...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, "Usage:")
			require.Empty(t, res.stderr)
		})
	}
}

func TestDatabaseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		contains []string
	}{
		{name: "unreachable PostgreSQL", args: []string{"stats", "--dsn", "postgres://nobody:s3cret@127.0.0.1:1/x"}, contains: []string{"connecting to PostgreSQL"}},
		{name: "unreachable MySQL", args: []string{"stats", "--dsn", "nobody:s3cret@tcp(127.0.0.1:1)/x"}, contains: []string{"connecting to MySQL"}},
		{name: "bad MySQL DSN", args: []string{"stats", "--dsn", "mysql://root@tcp(127.0.0.1:3306)"}, contains: []string{"parsing the MySQL DSN"}},
		{name: "missing table, PostgreSQL", args: []string{"stats", "--dsn", postgresDSN(), "--table", "no_such_inbox"}, contains: []string{`"no_such_inbox"`, "inbox schema postgres"}},
		{name: "missing table, MariaDB", args: []string{"stats", "--dsn", mariaDBDSN(), "--table", "no_such_inbox"}, contains: []string{`"no_such_inbox"`, "inbox schema mysql"}},
		{name: "missing table, purge", args: []string{"purge", "--dsn", postgresDSN(), "--table", "no_such_inbox", "--older-than", "720h"}, contains: []string{"inbox table missing"}},
		{name: "not a DSN", args: []string{"stats", "--dsn", "localhost:5432"}, contains: []string{"neither a PostgreSQL URL"}},
		{name: "invalid table name", args: []string{"stats", "--dsn", postgresDSN(), "--table", "inbox; drop"}, contains: []string{"not a valid table name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := inboxCLI(t, tt.args...)
			requireOneLineError(t, res, exitFail, tt.contains...)
			require.NotContains(t, res.stderr, "s3cret")
		})
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	for _, d := range databases() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)

			res := inboxCLI(t, "stats", "--dsn", db.dsn, "--table", db.table)
			require.Equal(t, 0, res.code, res.stderr)
			require.Equal(t, "no keys in "+db.table+"\n", res.stdout)

			db.insert(t, "billing", 3, 50*time.Hour)
			db.insert(t, "shipping", 2, time.Hour)

			res = inboxCLI(t, "stats", "--dsn", db.dsn, "--table", db.table)
			require.Equal(t, 0, res.code, res.stderr)
			lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
			require.Len(t, lines, 4)
			require.Equal(t, []string{"CONSUMER", "KEYS", "OLDEST", "AGE"}, strings.Fields(lines[0]))
			require.Equal(t, []string{"billing", "3"}, strings.Fields(lines[1])[:2])
			require.Equal(t, []string{"shipping", "2"}, strings.Fields(lines[2])[:2])
			require.Equal(t, []string{"(all)", "5"}, strings.Fields(lines[3])[:2])
			require.Equal(t, "2d2h0m", strings.Fields(lines[1])[3])

			res = inboxCLI(t, "stats", "--json", "--dsn", db.dsn, "--table", db.table)
			require.Equal(t, 0, res.code, res.stderr)
			var got struct {
				Table     string
				Keys      int64
				Oldest    time.Time
				Consumers []struct {
					Consumer string
					Keys     int64
					Oldest   time.Time
				}
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
			require.Equal(t, db.table, got.Table)
			require.Equal(t, int64(5), got.Keys)
			require.Len(t, got.Consumers, 2)
			require.Equal(t, "billing", got.Consumers[0].Consumer)
			require.Equal(t, int64(3), got.Consumers[0].Keys)
			require.Equal(t, got.Consumers[0].Oldest, got.Oldest)
			require.WithinDuration(t, time.Now().Add(-50*time.Hour), got.Oldest, time.Hour)
		})
	}
}

func TestForget(t *testing.T) {
	t.Parallel()
	for _, d := range databases() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			db.insert(t, "billing", 2, time.Hour)

			res := inboxCLI(t, "forget", "--dsn", db.dsn, "--table", db.table, "--consumer", "billing", "--key", "billing-1")
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, `forgot key "billing-1" of consumer "billing"`)
			require.Equal(t, 1, db.count(t))

			requireOneLineError(t, inboxCLI(t, "forget", "--dsn", db.dsn, "--table", db.table, "--consumer", "billing", "--key", "billing-1"),
				exitFail, `no key "billing-1" for consumer "billing"`)
			require.Equal(t, 1, db.count(t))
		})
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	for _, d := range databases() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			db.insert(t, "billing", 25, 40*24*time.Hour)
			db.insert(t, "billing-recent", 4, 2*time.Hour)
			purge := func(args ...string) result {
				return inboxCLI(t, append([]string{"purge", "--dsn", db.dsn, "--table", db.table}, args...)...)
			}

			// The guardrail refuses a cutoff younger than the minimum retention.
			requireOneLineError(t, purge("--older-than", "24h", "--json"), exitFail,
				"refusing to purge keys younger than 24h0m0s", "--min-retention is 168h0m0s", "--force")
			requireOneLineError(t, purge("--older-than", "720h", "--min-retention", "1000h"), exitFail, "--min-retention is 1000h0m0s")
			require.Equal(t, 29, db.count(t), "a refused purge deletes nothing")

			res := purge("--older-than", "720h", "--batch", "10", "--json")
			require.Equal(t, 0, res.code, res.stderr)
			require.Empty(t, res.stderr, "no progress line when stderr is not a terminal")
			var got struct {
				Deleted        int64   `json:"deleted"`
				Table          string  `json:"table"`
				OlderThan      string  `json:"older_than"`
				ElapsedSeconds float64 `json:"elapsed_seconds"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
			require.Equal(t, int64(25), got.Deleted)
			require.Equal(t, db.table, got.Table)
			require.Equal(t, "720h0m0s", got.OlderThan)
			require.Equal(t, 4, db.count(t))

			res = purge("--older-than", "720h")
			require.Equal(t, 0, res.code, res.stderr)
			require.True(t, strings.HasPrefix(res.stdout, "deleted 0 keys older than 720h0m0s from "+db.table+" in "), res.stdout)

			res = purge("--older-than", "1h", "--force", "--quiet")
			require.Equal(t, 0, res.code, res.stderr)
			require.Empty(t, res.stdout)
			require.Empty(t, res.stderr)
			require.Zero(t, db.count(t))
		})
	}
}

// On a terminal, purge shows its progress on stderr. script(1) gives the binary one.
func TestPurge_ProgressLineOnATerminal(t *testing.T) {
	t.Parallel()
	scriptPath, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) from util-linux is needed to run the binary on a terminal")
	}
	db := openPostgresTable(t)
	db.insert(t, "billing", 30, 40*24*time.Hour)

	command := strings.Join([]string{binary, "purge", "--dsn", "'" + db.dsn + "'", "--table", db.table, "--older-than", "720h", "--batch", "10"}, " ")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, scriptPath, "-qec", command, "/dev/null").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, want := range []string{"\rdeleted 10 keys, ", "\rdeleted 20 keys, ", "\rdeleted 30 keys, ", " keys/s, ", " elapsed", "deleted 30 keys older than 720h0m0s from " + db.table} {
		require.Contains(t, string(out), want)
	}
	require.Zero(t, db.count(t))
}

// A go-sql-driver DSN whose password holds '@' (and '/') is a MySQL DSN: the driver
// splits at the last '@', and so does the CLI.
func TestMySQLDSNWithAtInThePassword(t *testing.T) {
	t.Parallel()
	db := openMySQLTable(t, "MariaDB", "INBOX_MARIADB_DSN", mariaDBDSN(), false)
	root, err := sql.Open("mysql", mariaDBDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = root.Close() })
	user := fmt.Sprintf("cli_at_%08x", rand.Uint32())
	const password = "p@ss/w@rd"
	for _, host := range []string{"localhost", "127.0.0.1", "%"} {
		_, err := root.Exec(fmt.Sprintf("CREATE USER '%s'@'%s' IDENTIFIED BY '%s'", user, host, password))
		require.NoError(t, err)
		_, err = root.Exec(fmt.Sprintf("GRANT ALL ON test.* TO '%s'@'%s'", user, host))
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = root.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%s'", user, host)) })
	}
	cfg, err := mysql.ParseDSN(mariaDBDSN())
	require.NoError(t, err)
	cfg.User, cfg.Passwd = user, password
	dsn := cfg.FormatDSN()
	require.Contains(t, dsn, user+":"+password+"@tcp(")

	db.insert(t, "billing", 2, time.Hour)
	res := inboxCLI(t, "stats", "--dsn", dsn, "--table", db.table)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, []string{"billing", "2"}, strings.Fields(strings.Split(res.stdout, "\n")[1])[:2])
}
