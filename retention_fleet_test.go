package inbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// A fleet of purger processes (the test binary re-executed) runs an inbox.Retention on
// one table while the test writes keys into it and SIGKILLs whichever purger holds the
// turn. Each purger logs, to one file opened for appending (a line is one write, so the
// file's order is the order of the events), when it took the turn, before each batch,
// and before it gave the turn back. The check: a purger's lines come only while it
// holds the turn (no two turns overlap), a turn is taken while another is open only
// when that other's process was killed, every killed holder's turn was taken over, and
// the table is emptied once the writes stop.

const (
	fleetHelperEnv = "INBOX_FLEET_HELPER"
	fleetKindEnv   = "INBOX_FLEET_KIND"
	fleetDSNEnv    = "INBOX_FLEET_DSN"
	fleetTableEnv  = "INBOX_FLEET_TABLE"
	fleetLogEnv    = "INBOX_FLEET_LOG"

	fleetOlderThan = time.Second
	fleetBatch     = 50
	fleetWrites    = 8 * time.Second
)

// fleetKinds are the stores the fleet runs on, with their DSN for the test's servers.
func fleetKinds(t *testing.T) map[string]string {
	kinds := map[string]string{
		"pgx":         postgresDSN(),
		"sqlpostgres": postgresDSN(),
		"mariadb":     mariaDBDSN(),
		"sqlite":      filepath.Join(t.TempDir(), "fleet.db"),
	}
	if dsn := os.Getenv("INBOX_MYSQL_DSN"); dsn != "" {
		kinds["mysql"] = dsn
	}
	if dsn := os.Getenv("INBOX_TIDB_DSN"); dsn != "" {
		kinds["tidb"] = dsn
	}
	return kinds
}

// openFleetStore opens the store of kind on dsn and table, and a func that closes it.
func openFleetStore(ctx context.Context, kind, dsn, table string) (inbox.Store, func(), error) {
	switch kind {
	case "pgx":
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
		return store, pool.Close, err
	case "sqlpostgres":
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, nil, err
		}
		store, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Table: table})
		return store, func() { _ = db.Close() }, err
	case "mariadb", "mysql", "tidb":
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return nil, nil, err
		}
		engine, err := inbox.MySQLEngineOf(ctx, db)
		if err != nil {
			return nil, nil, err
		}
		store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table, Engine: engine})
		return store, func() { _ = db.Close() }, err
	case "sqlite":
		db, err := sql.Open("sqlite", sqlitestore.DSN(dsn))
		if err != nil {
			return nil, nil, err
		}
		store, err := sqlitestore.New(db, sqlitestore.Config{Table: table})
		return store, func() { _ = db.Close() }, err
	}
	return nil, nil, fmt.Errorf("no fleet store %q", kind)
}

// TestRetentionFleetHelper is a purger of the fleet, in a child process.
func TestRetentionFleetHelper(t *testing.T) {
	if os.Getenv(fleetHelperEnv) != "1" {
		return // not a child
	}
	ctx := context.Background()
	store, closeStore, err := openFleetStore(ctx, os.Getenv(fleetKindEnv), os.Getenv(fleetDSNEnv), os.Getenv(fleetTableEnv))
	require.NoError(t, err)
	defer closeStore()
	log, err := os.OpenFile(os.Getenv(fleetLogEnv), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	logged := &loggedTurns{Store: store, turns: store.(inbox.PurgeTurns), log: log}
	r, err := inbox.NewRetention(inbox.RetentionConfig{Store: logged, Interval: 150 * time.Millisecond, Jitter: 100 * time.Millisecond,
		Purge: inbox.PurgeConfig{OlderThan: fleetOlderThan, MinRetention: fleetOlderThan, BatchSize: fleetBatch, Pause: 10 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, r.Run(ctx)) // until killed
}

// loggedTurns is a store whose purge turns log what they do.
type loggedTurns struct {
	inbox.Store
	turns inbox.PurgeTurns
	log   *os.File
	runs  atomic.Int64
}

func (s *loggedTurns) line(verb string, run int64, extra ...any) {
	fmt.Fprintln(s.log, append([]any{verb, os.Getpid(), run}, extra...)...) // one write
}

func (s *loggedTurns) TakePurgeTurn(ctx context.Context, idle time.Duration) (inbox.PurgeTurn, error) {
	turn, err := s.turns.TakePurgeTurn(ctx, idle)
	if err != nil || turn == nil {
		return turn, err
	}
	n := s.runs.Add(1)
	s.line("take", n)
	return &loggedTurn{PurgeTurn: turn, s: s, run: n}, nil
}

type loggedTurn struct {
	inbox.PurgeTurn
	s   *loggedTurns
	run int64
}

func (t *loggedTurn) PurgeBatch(ctx context.Context, before time.Time, limit int) (inbox.Purged, error) {
	t.s.line("batch", t.run)
	n, err := t.PurgeTurn.PurgeBatch(ctx, before, limit)
	t.s.line("deleted", t.run, n.Keys)
	return n, err
}

func (t *loggedTurn) Release(ctx context.Context) error {
	t.s.line("release", t.run)
	return t.PurgeTurn.Release(ctx)
}

func TestRetentionFleet(t *testing.T) {
	if os.Getenv(fleetHelperEnv) == "1" {
		return
	}
	t.Parallel()
	for kind, dsn := range fleetKinds(t) {
		t.Run(kind, func(t *testing.T) { runFleet(t, kind, dsn) })
	}
}

// fleet is one run: the purger processes and the log they write.
type fleet struct {
	t                 *testing.T
	kind, dsn, table  string
	logPath           string
	mu                sync.Mutex
	procs             map[int]*exec.Cmd // by pid, alive
	killed            map[int]bool
	killedHolders     []fleetKill
	inserted, maxKeys int64
}

// fleetKill is a holder killed mid-turn: its pid, and how many log lines there were
// when it was dead.
type fleetKill struct{ pid, lines int }

const fleetPurgers = 3

func runFleet(t *testing.T, kind, dsn string) {
	ctx := context.Background()
	f := &fleet{t: t, kind: kind, dsn: dsn, table: tableName("fleet"), logPath: filepath.Join(t.TempDir(), "turns.log"),
		procs: map[int]*exec.Cmd{}, killed: map[int]bool{}}
	if kind == "sqlite" {
		require.NoError(t, os.WriteFile(dsn, nil, 0o644))
	}
	store, closeStore, err := openFleetStore(ctx, kind, dsn, f.table)
	require.NoError(t, err)
	t.Cleanup(closeStore)
	require.NoError(t, store.(interface{ CreateSchema(context.Context) error }).CreateSchema(ctx))
	t.Cleanup(func() { dropFleetTables(ctx, kind, dsn, f.table) })
	require.NoError(t, os.WriteFile(f.logPath, nil, 0o644))
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "fleet"})
	require.NoError(t, err)

	for range fleetPurgers {
		f.start()
	}
	t.Cleanup(f.stopAll)

	// The writer: 20 keys a batch, as fast as the database takes them.
	writeCtx, stopWriting := context.WithCancel(ctx)
	var writer sync.WaitGroup
	writer.Go(func() {
		for i := 0; writeCtx.Err() == nil; i++ {
			items := make([]inbox.Item, 20)
			for j := range items {
				items[j] = inbox.Item{Key: fmt.Sprintf("k-%d-%d", i, j)}
			}
			if _, err := ib.ProcessBatch(writeCtx, "fleet", items, func(context.Context, []int) error { return nil }); err == nil {
				atomic.AddInt64(&f.inserted, int64(len(items)))
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	sample := func() int64 {
		stats, err := store.Stats(ctx)
		require.NoError(t, err)
		var n int64
		for _, s := range stats {
			n += s.Keys
		}
		if n > f.maxKeys {
			f.maxKeys = n
		}
		return n
	}

	// For fleetWrites at least, and until four were killed, kill the holder of the turn
	// when one is open, at most one every 700 ms.
	start, deadline := time.Now(), time.Now().Add(60*time.Second)
	lastKill := time.Time{}
	for (len(f.killedHolders) < 4 || time.Since(start) < fleetWrites) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		sample()
		if pid, open := openHolder(f.read()); open && f.alive(pid) && time.Since(lastKill) > 700*time.Millisecond {
			f.kill(pid)
			lastKill = time.Now()
		}
	}
	stopWriting()
	writer.Wait()
	require.Eventually(t, func() bool { return sample() == 0 }, 60*time.Second, 200*time.Millisecond,
		"the fleet purges every key once the writes stop (OlderThan %v)", fleetOlderThan)
	f.stopAll()

	lines := f.read()
	runs, batches, deleted, overlaps := checkTurns(lines, f.killed)
	require.Empty(t, overlaps[:min(len(overlaps), 10)], "two purge turns overlapped (%d lines out of turn)", len(overlaps))
	require.GreaterOrEqual(t, len(f.killedHolders), 3, "purgers killed while holding the turn")
	// Unpurged, the table would hold every key written; the fleet keeps it to about the
	// keys of the last OlderThan and a run's interval.
	require.Less(t, f.maxKeys, atomic.LoadInt64(&f.inserted)*3/4, "the table stays bounded")
	for _, k := range f.killedHolders {
		require.True(t, takenAfter(lines[k.lines:], k.pid), "the turn of killed purger %d passed on", k.pid)
	}
	// A holder killed after the server ran its batch and before it logged the count
	// leaves those keys uncounted: the log's count is at most what was written.
	require.LessOrEqual(t, deleted, atomic.LoadInt64(&f.inserted))
	t.Logf("%s: %d purgers, %d runs with the turn, %d batches, %d keys written, %d purged by logged batches, %d holders SIGKILLed mid-turn (each taken over), at most %d keys in the table, 0 overlaps",
		kind, fleetPurgers, runs, batches, atomic.LoadInt64(&f.inserted), deleted, len(f.killedHolders), f.maxKeys)
}

// start starts a purger.
func (f *fleet) start() {
	cmd := exec.Command(os.Args[0], "-test.run=^TestRetentionFleetHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), fleetHelperEnv+"=1", fleetKindEnv+"="+f.kind, fleetDSNEnv+"="+f.dsn,
		fleetTableEnv+"="+f.table, fleetLogEnv+"="+f.logPath)
	cmd.Stderr = os.Stderr
	require.NoError(f.t, cmd.Start())
	f.mu.Lock()
	f.procs[cmd.Process.Pid] = cmd
	f.mu.Unlock()
}

func (f *fleet) alive(pid int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[pid] != nil
}

// kill SIGKILLs a holder, waits for its death, counts the log's lines then, and starts
// another purger.
func (f *fleet) kill(pid int) {
	f.mu.Lock()
	cmd := f.procs[pid]
	delete(f.procs, pid)
	f.killed[pid] = true
	f.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	f.killedHolders = append(f.killedHolders, fleetKill{pid: pid, lines: len(f.read())})
	f.start()
}

func (f *fleet) stopAll() {
	f.mu.Lock()
	procs := f.procs
	f.procs = map[int]*exec.Cmd{}
	f.mu.Unlock()
	for pid, cmd := range procs {
		f.killed[pid] = true
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

// fleetLine is one line of the log: verb, pid, run, and the keys a batch deleted.
type fleetLine struct {
	verb     string
	pid, run int
	keys     int64
}

func (f *fleet) read() []fleetLine {
	file, err := os.Open(f.logPath)
	require.NoError(f.t, err)
	defer file.Close()
	var lines []fleetLine
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue // a line being written
		}
		l := fleetLine{verb: fields[0]}
		l.pid, _ = strconv.Atoi(fields[1])
		l.run, _ = strconv.Atoi(fields[2])
		if len(fields) > 3 {
			l.keys, _ = strconv.ParseInt(fields[3], 10, 64)
		}
		lines = append(lines, l)
	}
	return lines
}

// openHolder returns the pid whose turn the log shows open.
func openHolder(lines []fleetLine) (int, bool) {
	pid, open := 0, false
	for _, l := range lines {
		switch l.verb {
		case "take":
			pid, open = l.pid, true
		case "release":
			open = false
		}
	}
	return pid, open
}

// checkTurns reads the log in order: each line but a take must be the current holder's,
// and a take while a turn is open is allowed only when the holder was killed.
func checkTurns(lines []fleetLine, killed map[int]bool) (runs, batches int, deleted int64, overlaps []string) {
	var holder fleetLine
	open := false
	for i, l := range lines {
		switch {
		case l.verb == "take":
			if open && !killed[holder.pid] {
				overlaps = append(overlaps, fmt.Sprintf("line %d: %d took the turn while %d, alive, held it", i+1, l.pid, holder.pid))
			}
			holder, open = l, true
			runs++
		case !open || l.pid != holder.pid || l.run != holder.run:
			overlaps = append(overlaps, fmt.Sprintf("line %d: %s of %d run %d while %d run %d holds the turn (open: %v)", i+1, l.verb, l.pid, l.run, holder.pid, holder.run, open))
		case l.verb == "batch":
			batches++
		case l.verb == "deleted":
			deleted += l.keys
		case l.verb == "release":
			open = false
		}
	}
	return runs, batches, deleted, overlaps
}

// takenAfter reports whether another process than pid took the turn in lines.
func takenAfter(lines []fleetLine, pid int) bool {
	for _, l := range lines {
		if l.verb == "take" && l.pid != pid {
			return true
		}
	}
	return false
}

// dropFleetTables drops the run's tables (SQLite's go with the test's directory).
func dropFleetTables(ctx context.Context, kind, dsn, table string) {
	var driver, drop string
	switch kind {
	case "pgx", "sqlpostgres":
		driver, drop = "pgx", fmt.Sprintf(`DROP TABLE IF EXISTS "%[1]s", "%[1]s_attempts", "%[1]s_offsets"`, table)
	case "mariadb", "mysql", "tidb":
		driver, drop = "mysql", fmt.Sprintf("DROP TABLE IF EXISTS `%[1]s`, `%[1]s_attempts`, `%[1]s_offsets`", table)
	default:
		return
	}
	if db, err := sql.Open(driver, dsn); err == nil {
		_, _ = db.ExecContext(ctx, drop)
		_ = db.Close()
	}
}
