package sqlitestore

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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
	require.NoError(t, runningFor(os.Getenv(livePathEnv)).start(token))
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
	require.NoError(t, r.start("mine"))
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
