package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestPostgresFailover runs the harness over RabbitMQ against a PostgreSQL 15 primary
// with a streaming standby of its own (never the shared cluster on 5432), SIGKILLs the
// primary's postmaster and backends while the workers commit, promotes the standby, and
// lets the workers reconnect through a DSN naming both hosts with
// target_session_attrs=read-write. Then it starts the dead primary's data folder alone
// (crash recovery) and counts what it had committed that the new primary lacks.
//
//   - async: the transactions the standby had not received are lost with their keys;
//     the ones in flight were never acked and come again: the ledger must be exact.
//   - sync (synchronous_standby_names): a commit returns once the standby has flushed
//     it, so no acked transaction can be lost: the ledger must be exact.
//
// Both print a FIGURES line: what the dead primary had committed, and how much of it
// the new primary lacks (docs/reliability.md has the figures).
//
// It needs root (it runs the clusters as the user postgres) and
// /usr/lib/postgresql/15/bin; set INBOX_PG_FAILOVER=1 to run it (.ci/run does).
func TestPostgresFailover(t *testing.T) {
	if os.Getenv("INBOX_PG_FAILOVER") == "" {
		t.Skip("PostgreSQL failover not tested: set INBOX_PG_FAILOVER=1 (needs root and /usr/lib/postgresql/15/bin; .ci/run sets it)")
	}
	need(t, "", "rabbitmq")
	for _, mode := range []string{"async", "sync"} {
		t.Run(mode, func(t *testing.T) { failover(t, mode, mode == "sync") })
	}
}

const pgBin = "/usr/lib/postgresql/15/bin"

// pgCluster is one PostgreSQL cluster of the test's own on a loopback port.
type pgCluster struct {
	dir  string
	port int
}

func (c pgCluster) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// asPostgres runs a PostgreSQL binary as the user postgres.
func asPostgres(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(pgBin, bin)}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", bin, strings.Join(args, " "), out)
	return string(out)
}

func (c pgCluster) start(t *testing.T) {
	t.Helper()
	asPostgres(t, "pg_ctl", "-D", c.dir, "-l", c.dir+".log", "-w", "-t", "60", "-o",
		fmt.Sprintf("-p %d -k %s", c.port, filepath.Dir(c.dir)), "start")
}

// kill SIGKILLs the postmaster and every backend it started: a crash, not a shutdown.
func (c pgCluster) kill(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.dir, "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(data), "\n", 2)[0])
	require.NoError(t, err)
	children, _ := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	for _, f := range strings.Fields(string(children)) {
		if child, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
	}
	t.Fatalf("postmaster %d survived SIGKILL", pid)
}

func (c pgCluster) stop() {
	_ = exec.Command("runuser", "-u", "postgres", "--", filepath.Join(pgBin, "pg_ctl"), "-D", c.dir, "-m", "immediate", "stop").Run()
}

// count returns a query's single number on cluster c.
func (c pgCluster) count(t *testing.T, query string) int {
	t.Helper()
	n, err := c.tryCount(query)
	require.NoError(t, err)
	return n
}

func (c pgCluster) tryCount(query string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn())
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, query).Scan(&n)
	return n, err
}

func failover(t *testing.T, name string, sync bool) {
	// Not t.TempDir: its parent is private to root, and the clusters run as postgres.
	root, err := os.MkdirTemp("", "inbox-failover-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o777))
	primary := pgCluster{dir: filepath.Join(root, "primary"), port: 5441}
	standby := pgCluster{dir: filepath.Join(root, "standby"), port: 5442}
	t.Cleanup(primary.stop)
	t.Cleanup(standby.stop)

	asPostgres(t, "initdb", "-D", primary.dir, "-U", "postgres", "--auth=trust", "--no-sync")
	conf := "listen_addresses = '127.0.0.1'\nwal_level = replica\nmax_wal_senders = 4\nfsync = on\n"
	if sync {
		conf += "synchronous_standby_names = 'standby'\nsynchronous_commit = on\n"
	}
	appendFile(t, filepath.Join(primary.dir, "postgresql.conf"), conf)
	appendFile(t, filepath.Join(primary.dir, "pg_hba.conf"), "host replication postgres 127.0.0.1/32 trust\n")
	primary.start(t)
	asPostgres(t, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
		"-D", standby.dir, "-R", "-X", "stream", "-c", "fast", "-d", "application_name=standby")
	// The standby, once promoted, stands alone: it must not wait for a standby of its own
	// (pg_basebackup copied the primary's synchronous_standby_names).
	appendFile(t, filepath.Join(standby.dir, "postgresql.conf"), "synchronous_standby_names = ''\n")
	standby.start(t)
	want := "async"
	if sync {
		want = "sync"
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n, err := primary.tryCount(`SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = '` + want + `'`)
		if err == nil && n == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the standby does not stream as %s", want)
	}

	// Both hosts; libpq-style failover: the first that accepts writes.
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.port, standby.port)
	run := fmt.Sprintf("failover_%d", time.Now().UnixNano()%1e9)
	const messages, accounts = 200, 10
	args := []string{"-db", "postgres", "-dsn", dsn, "-transport", "rabbitmq", "-run", run, "-keep", "-quiet",
		"-workers", "4", "-messages", strconv.Itoa(messages), "-accounts", strconv.Itoa(accounts), "-kill-every", "0", "-terminate-every", "0",
		"-fail-rate", "0.05", "-crash-rate", "0.02", "-handler-delay", "20ms", "-duration", "150s"}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// Kill the primary once a third of the messages committed there, while the workers
	// go on committing.
	ledger := pgx.Identifier{run + "_ledger"}.Sanitize()
	for deadline := time.Now().Add(100 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done // out is the harness's until it has exited
			t.Fatalf("the workers did not commit a third of the messages:\n%s", out.String())
		}
		if n, err := primary.tryCount("SELECT count(*) FROM " + ledger); err == nil && n >= messages/3 {
			break
		}
	}
	primary.kill(t)
	asPostgres(t, "pg_ctl", "-D", standby.dir, "-w", "-t", "60", "promote")

	err = <-done
	t.Logf("inbox-torture %s\n%s", strings.Join(args, " "), out.String())
	report := out.String()
	if sync {
		require.NoError(t, err, "the harness found a discrepancy or could not run")
		require.Contains(t, report, "OK: every message applied exactly once")
		require.Contains(t, report, fmt.Sprintf("ledger                  %d entries, %d inbox keys, for %d messages", messages, messages, messages))
	} else {
		// Asynchronous replication may lose commits the standby had not received, acked
		// messages among them (their key and effect together): the harness reports those
		// as never applied. Anything else it found is a failure.
		require.Regexp(t, `(?m)^\s*(OK: every message applied exactly once|\d+ messages never applied \(lost, or not delivered yet\), 0 applied more than once, 0 applied wrongly)$`,
			report, "the harness found more than messages lost in the failover, or could not run")
	}

	// What the dead primary had committed: its data folder, recovered on its own.
	old := pgCluster{dir: primary.dir, port: 5443}
	appendFile(t, filepath.Join(old.dir, "postgresql.conf"), "synchronous_standby_names = ''\n")
	old.start(t)
	t.Cleanup(old.stop)
	ctx := context.Background()
	before, after := readLedger(ctx, t, old, run), readLedger(ctx, t, standby, run)
	// Each lost key's ledger entry was lost with it: the old primary has exactly one entry
	// per key it holds.
	require.Equal(t, len(before.keys), before.count(), "the dead primary holds one ledger entry per key")

	// The new primary, message by message: applied once with its own amount, or missing
	// because the failover lost it — committed on the dead primary (so acked, never to
	// come again) and absent from the new one. Never missing for any other reason.
	var lost []string
	for _, k := range before.keys {
		if !after.hasKey[k] {
			lost = append(lost, k)
		}
	}
	var missing []string
	for i := range messages {
		key := "m" + strconv.Itoa(i)
		got := after.entries[key]
		switch {
		case len(got) == 0:
			missing = append(missing, key)
		case len(got) > 1:
			t.Errorf("message %s was applied %d times on the new primary", key, len(got))
		case got[0] != [2]int{i % accounts, i + 1}:
			t.Errorf("message %s credited %d to account %d, not %d to %d", key, got[0][1], got[0][0], i+1, i%accounts)
		}
	}
	sums := map[int]int64{}
	for _, es := range after.entries {
		for _, e := range es {
			sums[e[0]] += int64(e[1])
		}
	}
	for a := range accounts {
		require.Equal(t, sums[a], after.balances[a], "account %d's balance is not the sum of its ledger entries", a)
	}
	require.ElementsMatch(t, lost, missing, "the messages missing on the new primary must be exactly the keys the failover lost")
	require.Len(t, after.keys, messages-len(missing), "one inbox key per applied message on the new primary")
	if sync {
		require.Empty(t, lost, "synchronous replication lost an acked commit")
	}
	t.Logf("FIGURES %s: messages=%d committed-on-old-primary=%d lost-in-failover=%d ledger exact but for those",
		name, messages, len(before.keys), len(lost))
}

// ledger is what one cluster holds of a torture run: its inbox keys, and its ledger's
// entries per message key (account, amount).
type ledger struct {
	keys     []string
	hasKey   map[string]bool
	entries  map[string][][2]int
	balances map[int]int64
}

// count returns the number of ledger entries.
func (l ledger) count() int {
	n := 0
	for _, e := range l.entries {
		n += len(e)
	}
	return n
}

func readLedger(ctx context.Context, t *testing.T, c pgCluster, run string) ledger {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.dsn())
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT key FROM "+pgx.Identifier{run}.Sanitize())
	require.NoError(t, err)
	l := ledger{hasKey: map[string]bool{}, entries: map[string][][2]int{}}
	l.keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, k := range l.keys {
		l.hasKey[k] = true
	}
	rows, err = conn.Query(ctx, "SELECT msg_key, account, amount FROM "+pgx.Identifier{run + "_ledger"}.Sanitize())
	require.NoError(t, err)
	for rows.Next() {
		var key string
		var account, amount int
		require.NoError(t, rows.Scan(&key, &account, &amount))
		l.entries[key] = append(l.entries[key], [2]int{account, amount})
	}
	require.NoError(t, rows.Err())
	rows, err = conn.Query(ctx, "SELECT account, balance FROM "+pgx.Identifier{run + "_accounts"}.Sanitize())
	require.NoError(t, err)
	l.balances = map[int]int64{}
	for rows.Next() {
		var account int
		var balance int64
		require.NoError(t, rows.Scan(&account, &balance))
		l.balances[account] = balance
	}
	require.NoError(t, rows.Err())
	return l
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(text)
	require.NoError(t, errors.Join(err, f.Close()))
}
