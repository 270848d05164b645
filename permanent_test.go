package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/inboxui"
	"github.com/watermill-inbox/inbox/natskey"
	"github.com/watermill-inbox/inbox/outbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// sentinels are the exported errors of this module's packages, by the name
// docs/errors.md gives them.
var sentinels = map[string]error{
	"inbox.ErrNoKey": inbox.ErrNoKey, "inbox.ErrNoConsumer": inbox.ErrNoConsumer, "inbox.ErrDuplicate": inbox.ErrDuplicate,
	"inbox.ErrFingerprintMismatch": inbox.ErrFingerprintMismatch, "inbox.ErrContended": inbox.ErrContended,
	"inbox.ErrTooManyAttempts": inbox.ErrTooManyAttempts, "inbox.ErrTxDone": inbox.ErrTxDone, "inbox.ErrNoTable": inbox.ErrNoTable,
	"inbox.ErrRetention": inbox.ErrRetention, "inbox.ErrNoTx": inbox.ErrNoTx, "inbox.ErrAttemptsNeedConn": inbox.ErrAttemptsNeedConn,
	"inbox.ErrOutputTooLarge": inbox.ErrOutputTooLarge, "inbox.ErrNoTenant": inbox.ErrNoTenant, "inbox.ErrUnknownTenant": inbox.ErrUnknownTenant,
	"inbox.ErrStatementCache": inbox.ErrStatementCache, "inbox.ErrOffsetRewound": inbox.ErrOffsetRewound, "inbox.ErrNotInOrder": inbox.ErrNotInOrder,
	"inbox.ErrAttemptsBehindPooler": inbox.ErrAttemptsBehindPooler, "inbox.ErrMixedTenants": inbox.ErrMixedTenants,
	"inbox.ErrPurgeTurnBehindPooler": inbox.ErrPurgeTurnBehindPooler,
	"redisstore.ErrLeaseLost":        redisstore.ErrLeaseLost, "redisstore.ErrCrossSlot": redisstore.ErrCrossSlot,
	"redisstore.ErrCommandRefused": redisstore.ErrCommandRefused, "redisstore.ErrCommandFailed": redisstore.ErrCommandFailed,
	"redisstore.ErrNotReplicated": redisstore.ErrNotReplicated, "redisstore.ErrUnreachable": redisstore.ErrUnreachable,
	"redisstore.ErrNoJoin":          redisstore.ErrNoJoin,
	"inboxhttp.ErrResponseTooLarge": inboxhttp.ErrResponseTooLarge,
	"natskey.ErrTooManyDeliveries":  natskey.ErrTooManyDeliveries,
	"outbox.ErrNoTx":                outbox.ErrNoTx,
	"inboxtest.ErrInjected":         inboxtest.ErrInjected,
	"inboxtest.ErrPublishFailed":    inboxtest.ErrPublishFailed,
	"inboxtest.ErrEscaped":          inboxtest.ErrEscaped,
	"inboxtest.ErrNotApplied":       inboxtest.ErrNotApplied,
	"inboxui.ErrNoCredentials":      inboxui.ErrNoCredentials,
}

// TestErrorTable: docs/errors.md has a row for every exported error of the module's
// packages (nested modules' too), and Permanent agrees with its kind.
func TestErrorTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/errors.md")
	require.NoError(t, err)
	rows := map[string]string{} // name -> kind
	row := regexp.MustCompile("^\\| (`[^|]+`) \\| (permanent|transient) \\|")
	for _, line := range strings.Split(string(doc), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, name := range regexp.MustCompile("`([a-z]+\\.Err[A-Za-z]+)`").FindAllStringSubmatch(m[1], -1) {
			rows[name[1]] = m[2]
		}
	}
	for _, name := range exportedErrors(t) {
		kind, ok := rows[name]
		require.True(t, ok, "docs/errors.md has no row for %s", name)
		err, known := sentinels[name]
		if !known {
			require.Contains(t, []string{"inboxgorm.ErrNoTx", "inboxbun.ErrNoTx"}, name, "add %s to sentinels", name)
			continue // nested modules: checked in their own tests
		}
		wrapped := fmt.Errorf("inbox: consumer %q key %q: %w", "billing", "order-1", err)
		require.Equal(t, kind == "permanent", inbox.Permanent(wrapped), "%s is %s in docs/errors.md", name, kind)
		require.Equal(t, kind == "permanent", inbox.Permanent(errors.Join(io.ErrUnexpectedEOF, wrapped)), "%s joined with a broken connection", name)
	}
}

// exportedErrors returns pkg.ErrX for every exported package-level var named Err... of
// the module's packages and nested modules (not the examples, commands or tests).
func exportedErrors(t *testing.T) []string {
	var names []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "_examples", "examples", "cmd", "internal", "migrations", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(name.Name, "Err") && name.IsExported() {
						names = append(names, f.Name.Name+"."+name.Name)
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, names, "inbox.ErrNoKey")
	return names
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	deadlock := &pgconn.PgError{Code: "40P01"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a handler's error", errors.New("provider timed out"), false},
		{"a handler's error marked permanent", fmt.Errorf("order 7: %w", inbox.MarkPermanent(errors.New("unknown currency"))), true},
		{"a type of the handler's own", validationError{}, true},
		{"a type that says it is not", notPermanent{}, false},
		{"a broken connection", &net.OpError{Op: "read", Err: io.ErrUnexpectedEOF}, false},
		{"a context that ended", fmt.Errorf("inbox: %w", context.DeadlineExceeded), false},
		{"a deadlock, contended", fmt.Errorf("inbox: %w: %w", inbox.ErrContended, deadlock), false},
		{"too many attempts, and a rollback that failed", errors.Join(fmt.Errorf("inbox: %w", inbox.ErrTooManyAttempts), io.ErrUnexpectedEOF), true},
		{"a mismatch, with ErrDuplicate", errors.Join(inbox.ErrDuplicate, inbox.ErrFingerprintMismatch), true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, inbox.Permanent(tt.err), tt.name)
		require.Equal(t, !tt.want, inbox.ShouldRetry(middleware.RetryParams{Err: tt.err}), tt.name)
	}
	marked := inbox.MarkPermanent(io.EOF)
	require.Equal(t, io.EOF.Error(), marked.Error())
	require.ErrorIs(t, marked, io.EOF)
	require.NoError(t, inbox.MarkPermanent(nil))
}

type validationError struct{}

func (validationError) Error() string   { return "amount must be positive" }
func (validationError) Permanent() bool { return true }

type notPermanent struct{}

func (notPermanent) Error() string   { return "busy" }
func (notPermanent) Permanent() bool { return false }
