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
//   - async: a transaction whose COMMIT returned (its message acked) is lost with its
//     key and its effect when the standby had not received its WAL; it is never
//     delivered again. The check is exact all the same: the messages never applied on
//     the new primary are exactly the ones whose key the dead primary committed and the
//     new one lacks, and every other message is applied exactly once, with its amount.
//     On an idle loopback the standby keeps up and nothing is lost; under load it lags.
//   - sync (synchronous_standby_names): a commit returns once the standby has flushed
//     it, so no acked transaction can be lost: the ledger must be exact, nothing lost.
//
// Both read the two primaries with the harness's own ledger reader and checker, and
// print a FIGURES line: what the dead primary had committed, and which of its keys the
// new primary lacks (docs/reliability.md has the figures).
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
	const messages = 200
	args := []string{"-db", "postgres", "-dsn", dsn, "-transport", "rabbitmq", "-run", run, "-keep", "-quiet",
		"-workers", "4", "-messages", strconv.Itoa(messages), "-kill-every", "0", "-terminate-every", "0",
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
	report := out.String()
	t.Logf("inbox-torture %s\n%s", strings.Join(args, " "), report)

	// What the dead primary had committed: its data folder, recovered on its own.
	old := pgCluster{dir: primary.dir, port: 5443}
	appendFile(t, filepath.Join(old.dir, "postgresql.conf"), "synchronous_standby_names = ''\n")
	old.start(t)
	t.Cleanup(old.stop)
	exitCode := 0
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		exitCode = exit.ExitCode()
	} else {
		require.NoError(t, err, "the harness did not run")
	}
	o, err := parseFlags(args)
	require.NoError(t, err)
	before, after := readLedger(t, o, old.dsn()), readLedger(t, o, standby.dsn())
	lost, problems := failoverVerdict(o, before, after, report, exitCode, sync)
	require.Empty(t, problems, "the failover's ledgers against the harness's report")
	t.Logf("FIGURES %s: messages=%d committed-on-old-primary=%d lost-in-failover=%d %v, the same messages never applied, every other applied once",
		name, messages, len(before.keys), len(lost), lost)
}

// readLedger reads run o.run's ledger, balances and keys on the PostgreSQL at dsn with
// the harness's own reader.
func readLedger(t *testing.T, o options, dsn string) ledgerState {
	t.Helper()
	o.dsn = dsn
	ctx := context.Background()
	db, err := openPostgres(ctx, o, false)
	require.NoError(t, err)
	defer db.close()
	s, err := db.ledger(ctx)
	require.NoError(t, err)
	return s
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(text)
	require.NoError(t, errors.Join(err, f.Close()))
}
