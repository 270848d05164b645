package inboxhttp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
)

// Issue 19, defect 6: what no retry can change is not answered as retryable, and a
// panic net/http recovers is not a crash.

// newMiddlewareWith is newMiddleware with the inbox's config too.
func newMiddlewareWith(t testing.TB, b backend, icfg inbox.Config, cfg inboxhttp.Config) *inboxhttp.Idempotency {
	t.Helper()
	icfg.Store = b.store
	if icfg.Consumer == "" {
		icfg.Consumer = "http"
	}
	ib, err := inbox.New(icfg)
	require.NoError(t, err)
	cfg.Inbox = ib
	if cfg.Consumer == "" {
		cfg.Consumer = "POST /payments"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := inboxhttp.New(cfg)
	require.NoError(t, err)
	return m
}

// requirePermanent checks a problem that tells the client not to retry: no Retry-After,
// and the problem type of permanent failures.
func requirePermanent(t *testing.T, got reply, status int, typ string) {
	t.Helper()
	require.Equal(t, status, got.status, got.body)
	require.Empty(t, got.header.Get("Retry-After"), "a permanent refusal is not retryable")
	var p inboxhttp.Problem
	require.NoError(t, json.Unmarshal([]byte(got.body), &p), got.body)
	require.Equal(t, typ, p.Type)
	require.Equal(t, status, p.Status)
	require.NotContains(t, p.Detail, "retry it", got.body)
	require.False(t, got.replayed())
}

func TestPermanentRefusalsAreNotRetryable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		p := &payments{b: b}
		m := newMiddlewareWith(t, b, inbox.Config{MaxAttempts: 2, MaxOutputBytes: 256}, inboxhttp.Config{})
		url := serve(t, m, p)
		client := &http.Client{}

		// The response is under MaxResponseBody, but over what the inbox stores.
		for i := range 2 {
			got, err := post(t, client, url, "too-big", `{"amount":999}`)
			require.NoError(t, err)
			requirePermanent(t, got, http.StatusInternalServerError, inboxhttp.ProblemPermanent)
			require.Contains(t, got.body, "MaxOutputBytes")
			require.EqualValues(t, i+1, p.calls.Load(), "nothing stored")
		}

		// Two attempts of the key crashed the server: the request is refused, for good.
		for range 2 {
			claim, err := b.store.Claim(ctx, inbox.Record{Consumer: "POST /payments", Key: "poison", Attempt: token()})
			require.NoError(t, err)
			require.NoError(t, claim.Tx.Abandon(ctx))
		}
		calls := p.calls.Load()
		got, err := post(t, client, url, "poison", `{"amount":5}`)
		require.NoError(t, err)
		requirePermanent(t, got, http.StatusInternalServerError, inboxhttp.ProblemTooManyAttempts)
		require.Equal(t, calls, p.calls.Load(), "the handler did not run")
	})
}

// TestPanicIsNotACrash: net/http recovers a handler's panic, so the process lives on:
// the attempt ended cleanly, however often it panics, and MaxAttempts never refuses it.
func TestPanicIsNotACrash(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var calls atomic.Int32
		m := newMiddlewareWith(t, b, inbox.Config{MaxAttempts: 2}, inboxhttp.Config{})
		url := serve(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := b.credit(r.Context(), 1); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if calls.Add(1) <= 3 {
				panic("payments: boom")
			}
			w.WriteHeader(http.StatusCreated)
		}))
		client := &http.Client{}
		for range 3 {
			_, err := post(t, client, url, "panicky", `{}`)
			require.Error(t, err, "net/http drops the connection of a panicking handler")
		}
		got, err := post(t, client, url, "panicky", `{}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, got.status, got.body)
		require.EqualValues(t, 4, calls.Load())
		total, credits := b.balance(t)
		require.Equal(t, [2]int{1, 1}, [2]int{total, credits}, "the panics' writes rolled back")
	})
}

// token returns a random attempt token.
func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
