package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// inboxCLI runs the built binary with args, with INBOX_DSN unset.
func inboxCLI(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), "INBOX_DSN=")
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

// pgTable creates inbox tables of a fresh name on the test PostgreSQL, dropped when the
// test ends, and returns a pool and the name.
func pgTable(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, postgresDSN())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		msg := fmt.Sprintf("PostgreSQL is not reachable (set INBOX_POSTGRES_DSN): %v", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(pool.Close)
	table := fmt.Sprintf("cli_%08x", rand.Uint32())
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(ctx))
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize()+`, `+pgx.Identifier{table + "_attempts"}.Sanitize())
	})
	return pool, table
}

// insertKeys inserts n keys of consumer processed age ago.
func insertKeys(t *testing.T, pool *pgxpool.Pool, table, consumer string, n int, age time.Duration) {
	t.Helper()
	_, err := pool.Exec(context.Background(),
		`INSERT INTO `+pgx.Identifier{table}.Sanitize()+` (consumer, key, processed_at)
		 SELECT $1, $1 || '-' || i, now() - $2::interval FROM generate_series(1, $3) i`, consumer, age, n)
	require.NoError(t, err)
}

func countKeys(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n))
	return n
}

func TestSchema(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("../../schema/postgres.sql")
	require.NoError(t, err)
	renamed, err := inbox.PostgresSchema("orders_inbox")
	require.NoError(t, err)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "postgres, default table", args: []string{"schema", "postgres"}, want: string(file)},
		{name: "postgres, named table", args: []string{"schema", "postgres", "--table", "orders_inbox"}, want: renamed},
		{name: "flags before the database", args: []string{"schema", "--table", "orders_inbox", "postgresql"}, want: renamed},
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
	_, table := pgTable(t)
	tests := []struct {
		name     string
		args     []string
		contains []string
	}{
		{name: "unreachable database", args: []string{"stats", "--dsn", "postgres://nobody:s3cret@127.0.0.1:1/x"}, contains: []string{"connecting to PostgreSQL"}},
		{name: "missing table", args: []string{"stats", "--dsn", postgresDSN(), "--table", "no_such_inbox"}, contains: []string{`"no_such_inbox"`, "inbox schema postgres"}},
		{name: "missing table, purge", args: []string{"purge", "--dsn", postgresDSN(), "--table", "no_such_inbox", "--older-than", "720h"}, contains: []string{"inbox table missing"}},
		{name: "not a DSN", args: []string{"stats", "--dsn", "localhost:5432"}, contains: []string{"neither a PostgreSQL URL"}},
		{name: "invalid table name", args: []string{"stats", "--dsn", postgresDSN(), "--table", "inbox; drop"}, contains: []string{"not a valid table name"}},
		{name: "unknown key", args: []string{"forget", "--dsn", postgresDSN(), "--table", table, "--consumer", "c", "--key", "k"}, contains: []string{`no key "k" for consumer "c"`}},
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
	pool, table := pgTable(t)

	res := inboxCLI(t, "stats", "--dsn", postgresDSN(), "--table", table)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "no keys in "+table+"\n", res.stdout)

	insertKeys(t, pool, table, "billing", 3, 50*time.Hour)
	insertKeys(t, pool, table, "shipping", 2, time.Hour)

	res = inboxCLI(t, "stats", "--dsn", postgresDSN(), "--table", table)
	require.Equal(t, 0, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 4)
	require.Equal(t, []string{"CONSUMER", "KEYS", "OLDEST", "AGE"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"billing", "3"}, strings.Fields(lines[1])[:2])
	require.Equal(t, []string{"shipping", "2"}, strings.Fields(lines[2])[:2])
	require.Equal(t, []string{"(all)", "5"}, strings.Fields(lines[3])[:2])
	require.Equal(t, "2d2h0m", strings.Fields(lines[1])[3])

	res = inboxCLI(t, "stats", "--json", "--dsn", postgresDSN(), "--table", table)
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
	require.Equal(t, table, got.Table)
	require.Equal(t, int64(5), got.Keys)
	require.Len(t, got.Consumers, 2)
	require.Equal(t, "billing", got.Consumers[0].Consumer)
	require.Equal(t, int64(3), got.Consumers[0].Keys)
	require.Equal(t, got.Consumers[0].Oldest, got.Oldest)
	require.WithinDuration(t, time.Now().Add(-50*time.Hour), got.Oldest, time.Hour)
}

func TestForget(t *testing.T) {
	t.Parallel()
	pool, table := pgTable(t)
	insertKeys(t, pool, table, "billing", 2, time.Hour)

	res := inboxCLI(t, "forget", "--dsn", postgresDSN(), "--table", table, "--consumer", "billing", "--key", "billing-1")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `forgot key "billing-1" of consumer "billing"`)
	require.Equal(t, 1, countKeys(t, pool, table))

	requireOneLineError(t, inboxCLI(t, "forget", "--dsn", postgresDSN(), "--table", table, "--consumer", "billing", "--key", "billing-1"),
		exitFail, `no key "billing-1"`)
}

func TestPurge(t *testing.T) {
	t.Parallel()
	pool, table := pgTable(t)
	insertKeys(t, pool, table, "billing", 25, 40*24*time.Hour)
	insertKeys(t, pool, table, "billing-recent", 4, 2*time.Hour)

	t.Run("guardrail refuses a cutoff younger than the minimum retention", func(t *testing.T) {
		res := inboxCLI(t, "purge", "--dsn", postgresDSN(), "--table", table, "--older-than", "24h", "--json")
		requireOneLineError(t, res, exitFail, "refusing to purge keys younger than 24h0m0s", "--min-retention is 168h0m0s", "--force")
		res = inboxCLI(t, "purge", "--dsn", postgresDSN(), "--table", table, "--older-than", "720h", "--min-retention", "1000h")
		requireOneLineError(t, res, exitFail, "--min-retention is 1000h0m0s")
		require.Equal(t, 29, countKeys(t, pool, table), "a refused purge deletes nothing")
	})

	t.Run("json", func(t *testing.T) {
		res := inboxCLI(t, "purge", "--dsn", postgresDSN(), "--table", table, "--older-than", "720h", "--batch", "10", "--json")
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
		require.Equal(t, table, got.Table)
		require.Equal(t, "720h0m0s", got.OlderThan)
		require.Equal(t, 4, countKeys(t, pool, table))
	})

	t.Run("forced and quiet", func(t *testing.T) {
		res := inboxCLI(t, "purge", "--dsn", postgresDSN(), "--table", table, "--older-than", "1h", "--force", "--quiet")
		require.Equal(t, 0, res.code, res.stderr)
		require.Empty(t, res.stdout)
		require.Empty(t, res.stderr)
		require.Zero(t, countKeys(t, pool, table))
	})

	t.Run("plain", func(t *testing.T) {
		res := inboxCLI(t, "purge", "--dsn", postgresDSN(), "--table", table, "--older-than", "720h")
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, "deleted 0 keys older than 720h0m0s from "+table)
	})
}

// On a terminal, purge shows its progress on stderr. script(1) gives the binary one.
func TestPurge_ProgressLineOnATerminal(t *testing.T) {
	t.Parallel()
	scriptPath, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) from util-linux is needed to run the binary on a terminal")
	}
	pool, table := pgTable(t)
	insertKeys(t, pool, table, "billing", 30, 40*24*time.Hour)

	command := strings.Join([]string{binary, "purge", "--dsn", "'" + postgresDSN() + "'", "--table", table, "--older-than", "720h", "--batch", "10"}, " ")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, scriptPath, "-qec", command, "/dev/null").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, want := range []string{"\rdeleted 10 keys, ", "\rdeleted 20 keys, ", "\rdeleted 30 keys, ", " keys/s, ", " elapsed", "deleted 30 keys older than 720h0m0s from " + table} {
		require.Contains(t, string(out), want)
	}
	require.Zero(t, countKeys(t, pool, table))
}
