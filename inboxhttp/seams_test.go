package inboxhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
)

// The suspected items of issue 19 at inboxhttp's seams, each confirmed by a test that
// failed before its fix.

// TestTrailersAreStored: trailers the handler declares (Trailer header) or sets late
// (http.TrailerPrefix) go out with the first response and with every replay. They were
// dropped from both.
func TestTrailersAreStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Checksum")
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "paid")
			w.Header().Set("X-Checksum", "sha256:abc")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		}))
		for i := range 2 {
			req, err := http.NewRequest(http.MethodPost, url, nil)
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", `"with-trailers"`)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body) // trailers come after the body
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Equal(t, "paid", string(body))
			require.Equal(t, i == 1, resp.Header.Get("Idempotent-Replayed") == "true")
			require.Equal(t, "sha256:abc", resp.Trailer.Get("X-Checksum"), "call %d", i)
			require.Equal(t, "late", resp.Trailer.Get("X-Late"), "call %d", i)
			require.Empty(t, resp.Header.Get("X-Checksum"), "a trailer is not a header")
		}
	})
}

// TestJoinedTransactionIsNotJoined: a transaction the request context carries is not
// joined. The middleware must commit the response with the key before it sends it, and
// roll back what it does not store: in an outer transaction a 5xx left the key in it,
// which the outer commit stored without a response, and the response went out before
// that commit.
func TestJoinedTransactionIsNotJoined(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		claim, err := b.store.Claim(ctx, inbox.Record{Consumer: "outer", Key: "outer-1"})
		require.NoError(t, err)
		outer := claim.Tx.Handle() // a transaction of the application's, open
		commitOuter := func() error { return claim.Tx.Commit(ctx, nil) }
		t.Cleanup(func() { _ = claim.Tx.Rollback(ctx) })
		if b.readTx != nil { // one writer at a time: the outer transaction only reads
			require.NoError(t, claim.Tx.Commit(ctx, nil))
			tx := b.readTx(t)
			outer, commitOuter = tx, tx.Commit
		}
		m := newMiddleware(t, b, inboxhttp.Config{})
		var calls int
		var sawOuter bool
		h := m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			tx, _ := inbox.TxFromContext[any](r.Context())
			sawOuter = tx == outer
			if calls == 1 {
				http.Error(w, "downstream unavailable", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		url := serveHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r.WithContext(inbox.ContextWithTx(r.Context(), outer)))
		}))
		got, err := post(t, &http.Client{}, url, "k-joined", `{}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, got.status)
		require.False(t, sawOuter, "the handler runs in the middleware's own transaction")
		require.NoError(t, commitOuter(), "the outer transaction commits")

		got, err = post(t, &http.Client{}, url, "k-joined", `{}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, got.status, "the 503 stored nothing: the retry runs: %s", got.body)
		require.False(t, got.replayed())
		got, err = post(t, &http.Client{}, url, "k-joined", `{}`)
		require.NoError(t, err)
		require.True(t, got.replayed())
		require.Equal(t, 2, calls)
	})
}

// TestInFlightWaitIsContended: a request whose InFlightWait ran out (409) is observed
// as contended, not failed.
func TestInFlightWaitIsContended(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var mu sync.Mutex
		var outcomes []inbox.Outcome
		obs := inbox.ObserverFunc(func(_ context.Context, o inbox.Observation) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, o.Outcome)
		})
		p := &payments{b: b, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
		m := newMiddlewareWith(t, b, inbox.Config{Observer: obs}, inboxhttp.Config{InFlightWait: 300 * time.Millisecond})
		url := serve(t, m, p)
		first := make(chan reply, 1)
		go func() {
			got, _ := post(t, &http.Client{}, url, "slow", `{"amount":5}`)
			first <- got
		}()
		<-p.entered
		got, err := post(t, &http.Client{}, url, "slow", `{"amount":5}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, got.status, got.body)
		close(p.hold)
		require.Equal(t, http.StatusCreated, (<-first).status)
		mu.Lock()
		defer mu.Unlock()
		require.ElementsMatch(t, []inbox.Outcome{inbox.OutcomeContended, inbox.OutcomeProcessed}, outcomes)
	})
}

// serveHandler serves h on POST /payments.
func serveHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /payments", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/payments"
}
