package sqlitestore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// The helper runs in a child process (the test binary re-executed) on the parent's
// database file. "hold" claims a key, credits the ledger, says so, and then commits or
// rolls back when the parent writes that word on its stdin. "crash" processes a key with
// MaxAttempts whose handler credits the ledger and SIGKILLs its own process.
const (
	helperEnv     = "SQLITESTORE_HELPER"
	helperPathEnv = "SQLITESTORE_PATH"
	helperKeyEnv  = "SQLITESTORE_KEY"
	holding       = "helper: holding the key"
	failedCleanly = "helper: failed cleanly"
	inHandler     = "helper: in the handler, killing myself"
	maxAttempts   = 3
)

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return // not the child
	}
	ctx := context.Background()
	db := open(t, "sqlite", sqlitestore.DSN(os.Getenv(helperPathEnv)))
	store, err := sqlitestore.New(db, sqlitestore.Config{})
	require.NoError(t, err)
	l := ledger{db: db}
	key := os.Getenv(helperKeyEnv)
	switch mode {
	case "hold":
		claim, err := store.Claim(ctx, inbox.Record{Consumer: "billing", Key: key})
		require.NoError(t, err)
		require.False(t, claim.Duplicate)
		require.NoError(t, l.credit(inbox.ContextWithTx(ctx, claim.Tx.Handle()), 190))
		fmt.Println(holding)
		word, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if strings.TrimSpace(word) == "commit" {
			require.NoError(t, claim.Tx.Commit(ctx, nil))
		} else {
			require.NoError(t, claim.Tx.Rollback(ctx))
		}
	case "crash":
		ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: maxAttempts})
		require.NoError(t, err)
		_, err = ib.Process(ctx, "billing", key, func(ctx context.Context) error {
			if err := l.credit(ctx, 100); err != nil {
				return err
			}
			fmt.Println(inHandler)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		})
		t.Fatalf("the handler returned (%v) instead of killing the process", err)
	case "fail":
		ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: 1})
		require.NoError(t, err)
		boom := errors.New("provider timed out")
		_, err = ib.Process(ctx, "billing", key, func(ctx context.Context) error {
			if err := l.credit(ctx, 1); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond) // the others queue behind the key
			return boom
		})
		switch {
		case errors.Is(err, boom), errors.Is(err, inbox.ErrContended):
			fmt.Println(failedCleanly)
		default:
			fmt.Println("helper:", err)
		}
	}
}

// child starts the helper in mode on path and key.
func child(t *testing.T, mode, path, key string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperPathEnv+"="+path, helperKeyEnv+"="+key)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, stdin, bufio.NewScanner(stdout)
}

// waitFor reads the child's stdout until line.
func waitFor(t *testing.T, lines *bufio.Scanner, line string) {
	t.Helper()
	for lines.Scan() {
		if lines.Text() == line {
			return
		}
	}
	t.Fatalf("the helper ended before saying %q", line)
}

// A duplicate in another process waits for the first delivery's transaction (the file's
// write lock), then skips if it committed and processes if it rolled back. With
// LockTimeout the wait is bounded: ErrContended.
func TestDuplicateInAnotherProcess(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		end string
		dsn func(path string) string
	}{
		{"commit", sqlitestore.DSN},
		{"rollback", sqlitestore.DSN},
		// No busy_timeout on the handle: the store waits DefaultBusyTimeout itself.
		{"commit", func(path string) string { return "file:" + path }},
	} {
		end := c.end
		t.Run(fmt.Sprintf("%s/%s", end, c.dsn("app.db")), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := tempPath(t)
			db := open(t, "sqlite", c.dsn(path))
			l := newLedger(t, db)
			ib, err := inbox.New(inbox.Config{Store: newStore(t, db, sqlitestore.Config{}), Consumer: "billing"})
			require.NoError(t, err)
			bounded, err := inbox.New(inbox.Config{Store: newStore(t, db, sqlitestore.Config{LockTimeout: 200 * time.Millisecond}), Consumer: "billing"})
			require.NoError(t, err)

			cmd, stdin, lines := child(t, "hold", path, "order-1")
			waitFor(t, lines, holding)

			_, err = bounded.Process(ctx, "billing", "order-1", func(context.Context) error {
				t.Error("the key is held by the other process")
				return nil
			})
			require.ErrorIs(t, err, inbox.ErrContended, "LockTimeout bounds the wait for another process")

			type verdict struct {
				dup bool
				err error
			}
			second := make(chan verdict, 1)
			go func() {
				dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return l.credit(ctx, 190) })
				second <- verdict{dup, err}
			}()
			select {
			case v := <-second:
				t.Fatalf("the duplicate must wait for the other process's transaction, got %+v", v)
			case <-time.After(300 * time.Millisecond):
			}
			_, err = io.WriteString(stdin, end+"\n")
			require.NoError(t, err)
			require.NoError(t, cmd.Wait())
			v := <-second
			require.NoError(t, v.err)
			require.Equal(t, end == "commit", v.dup)
			total, credits := l.balance(t)
			require.Equal(t, [2]int{190, 1}, [2]int{total, credits})
		})
	}
}

// A handler that kills its process is counted across processes: after MaxAttempts such
// deaths the next delivery is refused as poison, its writes never committed.
func TestCrashesAreCountedAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := tempPath(t)
	db := open(t, "sqlite", sqlitestore.DSN(path))
	l := newLedger(t, db)
	store := newStore(t, db, sqlitestore.Config{})
	for range maxAttempts {
		cmd, _, lines := child(t, "crash", path, "poison-1")
		waitFor(t, lines, inHandler)
		err := cmd.Wait()
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "the helper should have been killed: %v", err)
		status, ok := exit.Sys().(syscall.WaitStatus)
		require.True(t, ok)
		require.Equal(t, syscall.SIGKILL, status.Signal())
	}
	total, _ := l.balance(t)
	require.Zero(t, total, "each crashed attempt rolled back its writes")

	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: maxAttempts})
	require.NoError(t, err)
	_, err = ib.Process(ctx, "billing", "poison-1", func(context.Context) error {
		t.Error("a poisoned message must not reach its handler")
		return nil
	})
	require.ErrorIs(t, err, inbox.ErrTooManyAttempts)
}

// Deliveries of one message in several processes that each fail cleanly are never
// counted as crashes, even with MaxAttempts 1: an attempt running in another process
// (waiting for the key, or between its start and its claim) holds its byte of the lock
// file. A crash there counts (TestCrashesAreCountedAcrossProcesses).
func TestCleanFailuresInSeveralProcessesAreNotCrashes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := tempPath(t)
	db := open(t, "sqlite", sqlitestore.DSN(path))
	l := newLedger(t, db)
	store := newStore(t, db, sqlitestore.Config{})
	const racers = 4
	var children []*exec.Cmd
	var outputs []*bufio.Scanner
	for range racers {
		cmd, _, lines := child(t, "fail", path, "order-1")
		children = append(children, cmd)
		outputs = append(outputs, lines)
	}
	for i, lines := range outputs {
		require.True(t, lines.Scan(), "racer %d said nothing", i)
		require.Equal(t, failedCleanly, lines.Text(), "racer %d", i)
		require.NoError(t, children[i].Wait())
	}
	total, _ := l.balance(t)
	require.Zero(t, total, "every racer rolled back")

	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: 1})
	require.NoError(t, err)
	dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return l.credit(ctx, 190) })
	require.NoError(t, err, "nothing crashed: a healthy message is never refused")
	require.False(t, dup)
}
