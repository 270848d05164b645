package inboxhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
)

type userKey struct{}

// quiet drops the middleware's logs where a test provokes them.
var quiet = slog.New(slog.DiscardHandler)

// authenticated is an authentication middleware as it runs outside the idempotency
// middleware: it puts the user named by X-User in the request's context.
func authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user := r.Header.Get("X-User"); user != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
		}
		next.ServeHTTP(w, r)
	})
}

// userScope is a Config.Scope: the authenticated user.
func userScope(r *http.Request) (string, error) {
	user, _ := r.Context().Value(userKey{}).(string)
	if user == "" {
		return "", errors.New("no authenticated user")
	}
	return user, nil
}

// postAs posts with the key as the user.
func postAs(t *testing.T, url, user, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if user != "" {
		req.Header.Set("X-User", user)
	}
	got, err := do(http.DefaultClient, req)
	require.NoError(t, err)
	return got
}

// serveAuthenticated serves m behind the authentication middleware, as an application
// must order them.
func serveAuthenticated(t *testing.T, m *inboxhttp.Idempotency, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /payments", authenticated(m.Middleware(h)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/payments"
}

// With Scope, two clients sending the same key (and the same request) are two keys:
// each gets its own response, and each one's retry its own replay. The handler's claim
// is the scoped key, as stored. Without Scope, the second client gets the first's
// response: the control.
func TestScopedKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var mu sync.Mutex
		var claims []inbox.Record
		p := &payments{b: b}
		recording := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec, ok := inbox.ClaimFromContext(r.Context())
			mu.Lock()
			if ok {
				claims = append(claims, inbox.Record{Consumer: rec.Consumer, Key: rec.Key})
			}
			mu.Unlock()
			p.ServeHTTP(w, r)
		})
		url := serveAuthenticated(t, newMiddleware(t, b, inboxhttp.Config{Scope: userScope, Logger: quiet}), recording)

		alice := postAs(t, url, "alice", "k1", `{"amount":5}`)
		bob := postAs(t, url, "bob", "k1", `{"amount":5}`)
		require.Equal(t, http.StatusCreated, alice.status, alice.body)
		require.Equal(t, http.StatusCreated, bob.status, bob.body)
		require.False(t, bob.replayed(), "bob's k1 is not alice's")
		require.Equal(t, `{"id":"pay-1","amount":5}`, alice.body)
		require.Equal(t, `{"id":"pay-2","amount":5}`, bob.body)
		for user, want := range map[string]reply{"alice": alice, "bob": bob} {
			again := postAs(t, url, user, "k1", `{"amount":5}`)
			require.True(t, again.replayed(), user)
			require.Equal(t, want.body, again.body, user)
		}
		require.Equal(t, int32(2), p.calls.Load())
		total, _ := b.balance(t)
		require.Equal(t, 10, total)
		require.Equal(t, []inbox.Record{
			{Consumer: "POST /payments", Key: inboxhttp.ScopedKey("alice", "k1")},
			{Consumer: "POST /payments", Key: inboxhttp.ScopedKey("bob", "k1")},
		}, claims, "the handler's claim is the scoped key, as stored")
		forgotten, err := b.store.Forget(context.Background(), "POST /payments", inboxhttp.ScopedKey("alice", "k1"))
		require.NoError(t, err)
		require.True(t, forgotten, "ScopedKey finds the stored key")

		// No scope for the request: 500, nothing run, nothing stored.
		got := postAs(t, url, "", "k2", `{"amount":5}`)
		requirePermanent(t, got, http.StatusInternalServerError, inboxhttp.ProblemPermanent)
		require.NotContains(t, got.body, "no authenticated user", "the scope's error is logged, not sent")
		empty := serveAuthenticated(t, newMiddleware(t, b, inboxhttp.Config{
			Scope:  func(*http.Request) (string, error) { return "", nil },
			Logger: quiet,
		}), p)
		requirePermanent(t, postAs(t, empty, "carol", "k3", `{"amount":5}`), http.StatusInternalServerError, inboxhttp.ProblemPermanent)
		require.Equal(t, int32(2), p.calls.Load())

		// The control: without Scope, keys are per route, and bob gets alice's response.
		unscoped := serveAuthenticated(t, newMiddleware(t, b, inboxhttp.Config{Consumer: "POST /unscoped"}), p)
		first := postAs(t, unscoped, "alice", "k1", `{"amount":5}`)
		second := postAs(t, unscoped, "bob", "k1", `{"amount":5}`)
		require.True(t, second.replayed())
		require.Equal(t, first.body, second.body)
	})
}

func TestScopedKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "5:alice:k1", inboxhttp.ScopedKey("alice", "k1"))
	require.NotEqual(t, inboxhttp.ScopedKey("a:b", "c"), inboxhttp.ScopedKey("a", "b:c"))
	require.NotEqual(t, inboxhttp.ScopedKey("", "1:a:b"), inboxhttp.ScopedKey("1", "a:b"))
}

// What the middleware answers itself says nothing of the library's internals, and New's
// error is one line that names each field.
func TestClientAndConfigErrorText(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), p)
		for key, want := range map[string]string{
			"":              "This request needs an idempotency key: no Idempotency-Key header.",
			`"unterminated`: "The idempotency key is malformed: the Idempotency-Key header is not a structured-field string: the closing quote is missing.",
		} {
			got := postAs(t, url, "", key, `{"amount":5}`)
			requireProblem(t, got, http.StatusBadRequest)
			var pr inboxhttp.Problem
			require.NoError(t, json.Unmarshal([]byte(got.body), &pr))
			require.Equal(t, want, pr.Detail)
			require.NotContains(t, strings.ToLower(pr.Detail), "inbox")
		}
	})
	t.Run("New", func(t *testing.T) {
		_, err := inboxhttp.New(inboxhttp.Config{})
		require.Error(t, err)
		require.NotContains(t, err.Error(), "\n")
		require.Equal(t, 1, strings.Count(err.Error(), "inboxhttp:"), "%q", err)
		require.Contains(t, err.Error(), "Inbox is nil")
		require.Contains(t, err.Error(), "Consumer is empty")
	})
}
