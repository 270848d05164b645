package inboxhttp_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/inboxhttp"
)

// The crash helper is a real server process (this test binary, re-executed): its
// middleware commits the handler's write and the response, and the process SIGKILLs
// itself as the response starts to go out, so the client gets nothing.
const (
	crashHelperEnv  = "INBOXHTTP_CRASH_HELPER"
	crashBackendEnv = "INBOXHTTP_CRASH_BACKEND"
	crashTableEnv   = "INBOXHTTP_CRASH_TABLE"
	crashLedgerEnv  = "INBOXHTTP_CRASH_LEDGER"
	crashListening  = "crash helper listening on "
	crashBody       = `{"id":"pay-crash","amount":100}`
)

// killOnWrite SIGKILLs the process when the middleware starts writing the response,
// which it does only after the commit.
type killOnWrite struct{ http.ResponseWriter }

func (k killOnWrite) WriteHeader(int) {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

func (k killOnWrite) Write([]byte) (int, error) { k.WriteHeader(0); return 0, nil }

func TestHelperProcess(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "1" {
		return // not the child: nothing to do
	}
	b := openBackend(t, os.Getenv(crashBackendEnv), os.Getenv(crashTableEnv), os.Getenv(crashLedgerEnv), false, nil, "")
	m := newMiddleware(t, b, inboxHTTPConfigForCrash())
	h := m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := b.credit(r.Context(), 100); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(crashBody))
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fmt.Fprintln(os.Stdout, crashListening+ln.Addr().String())
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(killOnWrite{w}, r)
	}))
	t.Fatalf("crash helper: the server stopped (%v) instead of being killed", err)
}

// TestServerKilledAfterCommit: the server process dies after the commit and before the
// response was written; the client's retry, to a new server on the same database, gets
// the stored response, and the handler does not run again.
func TestServerKilledAfterCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			crashHelperEnv+"=1",
			crashBackendEnv+"="+b.name,
			crashTableEnv+"="+b.table,
			crashLedgerEnv+"="+b.ledger,
		)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		lines := bufio.NewScanner(stdout)
		addr := ""
		for addr == "" && lines.Scan() {
			addr, _ = strings.CutPrefix(lines.Text(), crashListening)
			if addr == lines.Text() {
				addr = ""
			}
		}
		require.NotEmpty(t, addr, "the helper never said where it listens")

		_, err = post(t, &http.Client{}, "http://"+addr+"/payments", "crash-key", `{"amount":100}`)
		require.Error(t, err, "the server died before it wrote the response")
		err = cmd.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		status, ok := exit.Sys().(syscall.WaitStatus)
		require.True(t, ok)
		require.True(t, status.Signaled(), "the helper exited instead of being killed")
		require.Equal(t, syscall.SIGKILL, status.Signal())
		total, credits := b.balance(t)
		require.Equal(t, 100, total, "the helper committed before it died")
		require.Equal(t, 1, credits)

		m := newMiddleware(t, b, inboxHTTPConfigForCrash())
		srv := httptest.NewServer(m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.Error("the handler ran again after the commit")
			w.WriteHeader(http.StatusTeapot)
		})))
		t.Cleanup(srv.Close)
		got, err := post(t, &http.Client{}, srv.URL+"/payments", "crash-key", `{"amount":100}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, got.status, got.body)
		require.True(t, got.replayed())
		require.Equal(t, crashBody, got.body)
		require.Equal(t, "application/json", got.header.Get("Content-Type"))
		total, credits = b.balance(t)
		require.Equal(t, 100, total)
		require.Equal(t, 1, credits)
	})
}

func inboxHTTPConfigForCrash() inboxhttp.Config { return inboxhttp.Config{Consumer: "POST /payments"} }
