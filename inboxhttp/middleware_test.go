package inboxhttp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
)

// payments is the handler under test: it credits the body's amount through the inbox
// transaction and answers 201 with a payment id that counts its calls, so that a replay
// is told from a second run. Some amounts misbehave on purpose.
type payments struct {
	b     backend
	calls atomic.Int32
	// hold, when set, blocks each call (after its write) until it is closed.
	hold chan struct{}
	// entered is signalled when a call has written and is about to block on hold.
	entered chan struct{}
}

const (
	amountPanic   = 666 // the handler panics after its write
	amountFail    = 503 // the handler answers 503 after its write
	amountInvalid = 400 // the handler answers 400 without writing
	amountHuge    = 999 // the handler writes a response over any small cap
)

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.calls.Add(1)
	var req struct {
		Amount int `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Amount == amountInvalid {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"error":"invalid amount","call":%d}`, n)
		return
	}
	if err := p.b.credit(r.Context(), req.Amount); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if p.hold != nil {
		if p.entered != nil {
			p.entered <- struct{}{}
		}
		<-p.hold
	}
	switch req.Amount {
	case amountPanic:
		panic("payments: boom")
	case amountFail:
		http.Error(w, "downstream unavailable", http.StatusServiceUnavailable)
		return
	case amountHuge:
		_, _ = w.Write([]byte(strings.Repeat("x", 4096)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/payments/pay-%d", n))
	w.Header().Add("X-Multi", "a")
	w.Header().Add("X-Multi", "b")
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"id":"pay-%d","amount":%d}`, n, req.Amount)
}

// serve starts a real server on loopback with the middleware around h.
func serve(t *testing.T, m *inboxhttp.Idempotency, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /payments", m.Middleware(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/payments"
}

func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Parallel()
	for _, name := range backendNames {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newBackend(t, name))
		})
	}
}

func requireProblem(t *testing.T, got reply, status int) {
	t.Helper()
	requireProblemOf(t, got, status, "about:blank")
}

// requireProblemOf checks a problem of type typ.
func requireProblemOf(t *testing.T, got reply, status int, typ string) {
	t.Helper()
	require.Equal(t, status, got.status, got.body)
	require.Equal(t, "application/problem+json", got.header.Get("Content-Type"))
	var p inboxhttp.Problem
	require.NoError(t, json.Unmarshal([]byte(got.body), &p), got.body)
	require.Equal(t, status, p.Status)
	require.Equal(t, typ, p.Type)
	require.Equal(t, http.StatusText(status), p.Title)
	require.NotEmpty(t, p.Detail)
	require.False(t, got.replayed())
}
func TestFirstRequestThenReplay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), p)
		client := &http.Client{}

		first, err := post(t, client, url, "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"amount":5}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, first.status, first.body)
		require.Equal(t, `{"id":"pay-1","amount":5}`, first.body)
		require.False(t, first.replayed())
		require.Equal(t, "/payments/pay-1", first.header.Get("Location"))

		for range 2 {
			again, err := post(t, client, url, "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"amount":5}`)
			require.NoError(t, err)
			require.True(t, again.replayed())
			require.Equal(t, first.status, again.status)
			require.Equal(t, first.body, again.body, "byte for byte")
			for _, h := range []string{"Content-Type", "Location", "Content-Length"} {
				require.Equal(t, first.header.Get(h), again.header.Get(h), h)
			}
			require.Equal(t, []string{"a", "b"}, again.header.Values("X-Multi"))
		}
		require.Equal(t, int32(1), p.calls.Load(), "a replay does not run the handler")
		total, credits := b.balance(t)
		require.Equal(t, 5, total)
		require.Equal(t, 1, credits)

		// Another key is another request; a bare (Stripe-style) key works too.
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":7}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "bare-key_2")
		other, err := do(client, req)
		require.NoError(t, err)
		require.Equal(t, `{"id":"pay-2","amount":7}`, other.body)
	})
}

func TestSameKeyDifferentRequest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), p)
		client := &http.Client{}
		first, err := post(t, client, url, "k1", `{"amount":5}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, first.status)

		got, err := post(t, client, url, "k1", `{"amount":50}`)
		require.NoError(t, err)
		requireProblem(t, got, http.StatusUnprocessableEntity)

		// Same body on another path: the fingerprint covers the path and query too.
		got, err = post(t, client, url+"?currency=eur", "k1", `{"amount":5}`)
		require.NoError(t, err)
		requireProblem(t, got, http.StatusUnprocessableEntity)

		require.Equal(t, int32(1), p.calls.Load())
		total, _ := b.balance(t)
		require.Equal(t, 5, total)
	})
}

func TestMissingKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		client := &http.Client{}
		p := &payments{b: b}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), p)
		got, err := post(t, client, url, "", `{"amount":5}`)
		require.NoError(t, err)
		requireProblem(t, got, http.StatusBadRequest)
		require.Contains(t, got.body, "needs an idempotency key")
		require.Zero(t, p.calls.Load())

		// Malformed: refused, even where a key is optional.
		for _, bad := range []string{`"unterminated`, `"a" "b"`, "has space", `"bad\escape"`} {
			req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":5}`))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", bad)
			got, err := do(client, req)
			require.NoError(t, err)
			requireProblem(t, got, http.StatusBadRequest)
			require.Contains(t, got.body, "malformed", bad)
		}

		// Optional: passed through, without deduplication or a transaction.
		var sawTx atomic.Bool
		optional := serve(t, newMiddleware(t, b, inboxhttp.Config{Optional: true}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, ok := inbox.TxFromContext[any](r.Context())
			sawTx.Store(ok)
			w.WriteHeader(http.StatusAccepted)
		}))
		for range 2 {
			got, err := post(t, client, optional, "", `{}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusAccepted, got.status)
			require.False(t, got.replayed())
		}
		require.False(t, sawTx.Load(), "no transaction without a key")
	})
}
