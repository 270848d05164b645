package inboxhttp

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// TestErrorTable: what a failed request gets (status, Retry-After, problem type) is
// what docs/errors.md's table says, for every error it answers with 500 or 503.
func TestErrorTable(t *testing.T) {
	t.Parallel()
	errs := map[string]error{
		"inbox.ErrTooManyAttempts": inbox.ErrTooManyAttempts, "inbox.ErrOutputTooLarge": inbox.ErrOutputTooLarge,
		"inbox.ErrTxDone": inbox.ErrTxDone, "inbox.ErrNoTx": inbox.ErrNoTx, "inbox.ErrNoTable": inbox.ErrNoTable,
		"inbox.ErrAttemptsNeedConn": inbox.ErrAttemptsNeedConn, "redisstore.ErrCrossSlot": redisstore.ErrCrossSlot,
		"redisstore.ErrCommandRefused": redisstore.ErrCommandRefused, "redisstore.ErrLeaseLost": redisstore.ErrLeaseLost,
		"redisstore.ErrCommandFailed": redisstore.ErrCommandFailed, "redisstore.ErrNotReplicated": redisstore.ErrNotReplicated,
		"redisstore.ErrUnreachable": redisstore.ErrUnreachable, "inboxhttp.ErrResponseTooLarge": ErrResponseTooLarge,
		"inbox.ErrStatementCache": inbox.ErrStatementCache, "inbox.ErrAttemptsBehindPooler": inbox.ErrAttemptsBehindPooler,
	}
	doc, err := os.ReadFile("../docs/errors.md")
	require.NoError(t, err)
	row := regexp.MustCompile("^\\| `([a-z]+\\.Err[A-Za-z]+)` \\| [a-z]+ \\| [^|]+ \\| (50[03]), (1|—), `(#[a-z]+)` \\|")
	checked := 0
	for _, line := range strings.Split(string(doc), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		e, ok := errs[m[1]]
		require.True(t, ok, "add %s to the test's errors", m[1])
		f := failureOf(fmt.Errorf("inbox: consumer %q key %q: %w", "POST /payments", "k", e))
		require.Equal(t, m[2], fmt.Sprint(f.status), m[1])
		require.Equal(t, m[3] == "1", f.retryAfter, "%s: Retry-After", m[1])
		require.True(t, strings.HasSuffix(f.typ, "/docs/errors.md"+m[4]), "%s: problem type %s", m[1], f.typ)
		if f.status == http.StatusServiceUnavailable {
			require.Contains(t, f.detail, "retry it")
		}
		checked++
	}
	require.Len(t, errs, checked, "every error of the test has its row")
}
