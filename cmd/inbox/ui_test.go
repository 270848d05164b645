package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer safe for the process's writes and the test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// inbox ui serves the page on a loopback port behind Basic credentials, until
// SIGTERM; the DSN's password appears neither in its output nor on the page, whether
// the DSN comes from --dsn or from INBOX_DSN, and whether the UI password is chosen or
// made up.
func TestUI(t *testing.T) {
	t.Parallel()
	const dsnSecret = "dsn-pw-Zq81" // PostgreSQL trusts the test's connections: any password goes
	db := openPostgresTable(t)
	db.insert(t, "billing", 3, time.Hour)
	dsn := strings.Replace(db.dsn, "postgres@", "postgres:"+dsnSecret+"@", 1)
	require.Contains(t, dsn, dsnSecret)
	for _, tc := range []struct {
		name     string
		args     []string
		env      []string
		password string // "" when the command makes one up
	}{
		{"dsn flag, made-up password", []string{"--dsn", dsn}, nil, ""},
		{"INBOX_DSN, chosen password", nil, []string{"INBOX_DSN=" + dsn, "INBOX_UI_PASSWORD=ui-pw-4471"}, "ui-pw-4471"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append([]string{"ui", "--table", db.table, "--addr", "127.0.0.1:0", "--user", "ops"}, tc.args...)
			cmd := exec.CommandContext(ctx, binary, args...)
			cmd.Env = append(append(os.Environ(), "INBOX_DSN=", "INBOX_UI_PASSWORD="), tc.env...)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var stderr, out lockedBuffer
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			line, err := bufio.NewReader(io.TeeReader(stdout, &out)).ReadString('\n')
			require.NoError(t, err, "stderr: %s", stderr.String())
			m := regexp.MustCompile(`^inbox ui: serving (http://127\.0\.0\.1:\d+/) as user "ops"(?:, password ([0-9a-f]{32}) \(set INBOX_UI_PASSWORD to choose it\)| with the password in \$INBOX_UI_PASSWORD)\n$`).FindStringSubmatch(line)
			require.NotNil(t, m, "the first line: %q", line)
			url, password := m[1], tc.password
			if password == "" {
				password = m[2]
				require.NotEmpty(t, password, "a made-up password is printed once")
			} else {
				require.NotContains(t, line, password, "a chosen password is never printed")
			}

			get := func(user, pass string) (int, string) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				require.NoError(t, err)
				if user != "" {
					req.SetBasicAuth(user, pass)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp.StatusCode, string(b)
			}
			status, _ := get("", "")
			require.Equal(t, http.StatusUnauthorized, status)
			status, _ = get("ops", "wrong")
			require.Equal(t, http.StatusUnauthorized, status)
			status, page := get("ops", password)
			require.Equal(t, http.StatusOK, status, page)
			require.Regexp(t, `<td class="name">billing</td>\s*<td class="n">3</td>`, page)
			require.NotContains(t, page, dsnSecret, "the page shows the DSN's password")
			require.NotContains(t, page, "127.0.0.1:5432", "the page shows no DSN at all")

			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			_, _ = io.Copy(io.Discard, io.TeeReader(stdout, &out))
			require.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
			for _, text := range []string{out.String(), stderr.String()} {
				require.NotContains(t, text, dsnSecret, "the output shows the DSN's password")
			}
			require.Contains(t, stderr.String(), `msg="inboxui: request refused"`, "the refused requests are logged")
		})
	}
}

// inbox ui refuses an address other hosts reach (its credentials travel in clear), and
// a DSN's password stays out of its errors.
func TestUIUsage(t *testing.T) {
	t.Parallel()
	res := inboxCLI(t, "ui", "--dsn", "postgres://u:dsn-pw-Zq81@127.0.0.1:5432/test", "--addr", "0.0.0.0:8080")
	requireOneLineError(t, res, exitUsage, "is not a loopback address")
	require.NotContains(t, res.stdout+res.stderr, "dsn-pw-Zq81")
	res = inboxCLI(t, "ui", "--dsn", "postgres://u:dsn-pw-Zq81@127.0.0.1:1/test", "--addr", "127.0.0.1:0")
	require.Equal(t, exitFail, res.code, res.stderr)
	require.NotContains(t, res.stdout+res.stderr, "dsn-pw-Zq81", "a connection error shows the DSN's password")
	res = inboxCLI(t, "ui")
	requireOneLineError(t, res, exitUsage, "--dsn is required")
}
