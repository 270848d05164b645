package sqlitestore

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // "sqlite"

	"github.com/watermill-inbox/inbox"
)

// The live helper is a child process (the test binary re-executed) that starts an
// attempt on the database path it is given, says so, and waits to be killed.
const (
	liveHelperEnv = "SQLITESTORE_LIVE_HELPER"
	livePathEnv   = "SQLITESTORE_LIVE_PATH"
	liveStarted   = "live helper: attempt started"
)

func TestLiveHelperProcess(t *testing.T) {
	token := os.Getenv(liveHelperEnv)
	if token == "" {
		return // not the child
	}
	require.NoError(t, runningFor(os.Getenv(livePathEnv)).start(token, "billing", "order-1"))
	fmt.Println(liveStarted)
	select {} // until killed
}

// An attempt running in another process holds its byte; when that process dies, the
// attempt no longer runs. In this process the registry says it.
func TestAttemptsRunningAcrossProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	r := runningFor(path)
	require.Same(t, r, runningFor(path), "one registry per database file and process")

	running, err := r.isRunning("never-started")
	require.NoError(t, err)
	require.False(t, running)
	require.NoError(t, r.start("mine", "billing", "order-1"))
	running, err = r.isRunning("mine")
	require.NoError(t, err)
	require.True(t, running)
	r.end("mine")
	running, err = r.isRunning("mine")
	require.NoError(t, err)
	require.False(t, running, "ended")

	cmd := exec.Command(os.Args[0], "-test.run=^TestLiveHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), liveHelperEnv+"=theirs", livePathEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != liveStarted {
	}
	running, err = r.isRunning("theirs")
	require.NoError(t, err)
	require.True(t, running, "the other process's attempt runs")
	running, err = r.isRunning("mine")
	require.NoError(t, err)
	require.False(t, running, "another attempt's byte is free")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	running, err = r.isRunning("theirs")
	require.NoError(t, err)
	require.False(t, running, "its process died: the kernel dropped the lock")
}

// The attempt helper is a child process that starts an attempt of a key on the database
// it is given, as a claim does before it begins its transaction, and then lets go of
// the write lock: its attempt runs without holding the key (a delivery between its
// start and its claim, or whose claim gave up and whose end is pending).
const (
	attemptHelperEnv = "SQLITESTORE_ATTEMPT_HELPER"
	attemptStarted   = "attempt helper: started"
)

func TestAttemptHelperProcess(t *testing.T) {
	token := os.Getenv(attemptHelperEnv)
	if token == "" {
		return // not the child
	}
	ctx := context.Background()
	s := openTestStore(t, os.Getenv(livePathEnv))
	l, err := s.enter(ctx, "test")
	require.NoError(t, err)
	require.NoError(t, s.startAttempt(ctx, l, inbox.Record{Consumer: "billing", Key: "order-1", Attempt: token}))
	l.release()
	fmt.Println(attemptStarted)
	select {} // until killed
}

// openTestStore opens the store on the file at path, with its tables.
func openTestStore(t *testing.T, path string) *Store {
	db, err := sql.Open("sqlite", DSN(path))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db, Config{})
	require.NoError(t, err)
	require.NoError(t, s.CreateSchema(context.Background()))
	return s
}

// A claim does not count an attempt of the key that runs in another process, or in
// this one, without holding the key; once that process dies, the attempt counts.
func TestClaimCountsOnlyDeadAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "inbox.db")
	s := openTestStore(t, path)
	claim := func() int {
		c, err := s.Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-1", Attempt: fmt.Sprint("mine-", time.Now().UnixNano())})
		require.NoError(t, err)
		require.False(t, c.Duplicate)
		require.NoError(t, c.Tx.Rollback(ctx), "a clean failure")
		return c.Unfinished
	}

	// In this process.
	l, err := s.enter(ctx, "test")
	require.NoError(t, err)
	require.NoError(t, s.startAttempt(ctx, l, inbox.Record{Consumer: "billing", Key: "order-1", Attempt: "here"}))
	l.release()
	require.Zero(t, claim(), "an attempt of this process that runs")
	require.NoError(t, s.EndAttempt(ctx, inbox.Record{Consumer: "billing", Key: "order-1", Attempt: "here"}))

	// In another process.
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttemptHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), attemptHelperEnv+"=there", livePathEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != attemptStarted {
	}
	require.Zero(t, claim(), "an attempt that runs in another process")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Equal(t, 1, claim(), "its process died: a crash")
}
