package inboxhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	require.Equal(t, status, got.status, got.body)
	require.Equal(t, "application/problem+json", got.header.Get("Content-Type"))
	var p inboxhttp.Problem
	require.NoError(t, json.Unmarshal([]byte(got.body), &p), got.body)
	require.Equal(t, status, p.Status)
	require.Equal(t, "about:blank", p.Type)
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

// TestClientTimedOutWhileServerCommitted: the client gives up while the handler is still
// running; the server finishes and commits anyway (the handler's context is detached from
// the client), and the client's retry gets the stored response, waiting for the first
// request's transaction if it is still open.
func TestClientTimedOutWhileServerCommitted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), p)

		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"amount":9}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", `"retry-me"`)
		gaveUp := make(chan error, 1)
		go func() { _, err := do(http.DefaultClient, req); gaveUp <- err }()
		<-p.entered // the handler wrote through the transaction
		cancel()    // the client times out
		require.ErrorIs(t, <-gaveUp, context.Canceled)

		retried := make(chan reply, 1)
		go func() {
			got, err := post(t, &http.Client{}, url, "retry-me", `{"amount":9}`)
			if err != nil {
				got = reply{body: err.Error()}
			}
			retried <- got
		}()
		close(p.hold) // the first request goes on and commits
		got := <-retried
		require.Equal(t, http.StatusCreated, got.status, got.body)
		require.True(t, got.replayed())
		require.Equal(t, `{"id":"pay-1","amount":9}`, got.body)
		require.Equal(t, int32(1), p.calls.Load())
		total, credits := b.balance(t)
		require.Equal(t, 9, total)
		require.Equal(t, 1, credits)
	})
}

// TestConcurrentRequestsOneKey: 16 concurrent requests with one key; the effect happens
// once, and every response is the stored one or a 409. The 15 others are sent while the
// first is in its handler: with Wait they wait and get the stored response; with
// Conflict they get 409 at once.
func TestConcurrentRequestsOneKey(t *testing.T) {
	t.Parallel()
	for _, mode := range []inboxhttp.InFlightMode{inboxhttp.Wait, inboxhttp.Conflict} {
		t.Run(mode.String(), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				p := &payments{b: b, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
				url := serve(t, newMiddleware(t, b, inboxhttp.Config{InFlight: mode}), p)
				client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 32, MaxIdleConnsPerHost: 32}}

				const n = 16
				replies := make([]reply, n)
				errs := make([]error, n)
				var first, others sync.WaitGroup
				first.Go(func() { replies[0], errs[0] = post(t, client, url, "one-key", `{"amount":3}`) })
				<-p.entered
				for i := 1; i < n; i++ {
					others.Go(func() { replies[i], errs[i] = post(t, client, url, "one-key", `{"amount":3}`) })
				}
				if mode == inboxhttp.Conflict {
					others.Wait() // all answered while the first still holds the key
				} else {
					time.Sleep(100 * time.Millisecond) // let them pile up behind the first
				}
				close(p.hold)
				first.Wait()
				others.Wait()

				require.NoError(t, errs[0])
				require.Equal(t, http.StatusCreated, replies[0].status, replies[0].body)
				require.Equal(t, `{"id":"pay-1","amount":3}`, replies[0].body)
				require.False(t, replies[0].replayed())
				for i, got := range replies[1:] {
					require.NoError(t, errs[i+1])
					if mode == inboxhttp.Conflict {
						requireProblem(t, got, http.StatusConflict)
						require.Equal(t, "1", got.header.Get("Retry-After"))
						continue
					}
					require.True(t, got.replayed(), "every waiting request gets the stored response: %d %s", got.status, got.body)
					require.Equal(t, http.StatusCreated, got.status)
					require.Equal(t, `{"id":"pay-1","amount":3}`, got.body)
				}
				require.Equal(t, int32(1), p.calls.Load())
				total, credits := b.balance(t)
				require.Equal(t, 3, total)
				require.Equal(t, 1, credits)
			})
		})
	}
}

// TestInFlightWaitRunsOut: a request that waits on a held key longer than InFlightWait
// gets 409, and nothing of it is stored; once the first is done, the retry gets its
// response.
func TestInFlightWaitRunsOut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{InFlightWait: 200 * time.Millisecond}), p)
		client := &http.Client{}
		firstDone := make(chan reply, 1)
		go func() {
			got, err := post(t, client, url, "slow", `{"amount":4}`)
			if err != nil {
				got.body = err.Error()
			}
			firstDone <- got
		}()
		<-p.entered
		got, err := post(t, client, url, "slow", `{"amount":4}`)
		require.NoError(t, err)
		requireProblem(t, got, http.StatusConflict)
		close(p.hold)
		require.Equal(t, http.StatusCreated, (<-firstDone).status)

		got, err = post(t, client, url, "slow", `{"amount":4}`)
		require.NoError(t, err)
		require.True(t, got.replayed())
		require.Equal(t, `{"id":"pay-1","amount":4}`, got.body)
		require.Equal(t, int32(1), p.calls.Load())
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

// TestPanicRollsBack: a panic rolls the handler's writes and the key back; the client's
// connection is dropped (net/http's own answer to a panic), and a retry runs again.
func TestPanicRollsBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), p)
		client := &http.Client{}
		_, err := post(t, client, url, "panicky", `{"amount":666}`)
		require.Error(t, err, "the server drops the connection of a panicking handler")
		total, _ := b.balance(t)
		require.Zero(t, total)

		got, err := post(t, client, url, "panicky", `{"amount":666}`)
		require.Error(t, err, "nothing was stored: the retry runs the handler again (and it panics again)")
		require.Equal(t, int32(2), p.calls.Load(), got.body)
		total, _ = b.balance(t)
		require.Zero(t, total)
	})
}

// TestStatusClasses: a 5xx is a failure, rolled back and not stored, so the retry runs
// the handler again; a 4xx is a result, stored and replayed.
func TestStatusClasses(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), p)
		client := &http.Client{}

		failed, err := post(t, client, url, "flaky", `{"amount":503}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, failed.status)
		require.False(t, failed.replayed())
		total, _ := b.balance(t)
		require.Zero(t, total, "the 503's write was rolled back")
		again, err := post(t, client, url, "flaky", `{"amount":503}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, again.status)
		require.False(t, again.replayed(), "a 5xx is not stored")
		require.Equal(t, int32(2), p.calls.Load())

		invalid, err := post(t, client, url, "invalid", `{"amount":400}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, invalid.status)
		replayed, err := post(t, client, url, "invalid", `{"amount":400}`)
		require.NoError(t, err)
		require.True(t, replayed.replayed(), "a 4xx is a result: stored")
		require.Equal(t, invalid.body, replayed.body)
		require.Equal(t, int32(3), p.calls.Load())

		// Configurable: here a 4xx is not stored either.
		strict := serve(t, newMiddleware(t, b, inboxhttp.Config{Consumer: "strict", StoreStatus: func(s int) bool { return s < 400 }}), p)
		for range 2 {
			got, err := post(t, client, strict, "invalid", `{"amount":400}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, got.status)
			require.False(t, got.replayed())
		}
		require.Equal(t, int32(5), p.calls.Load())
	})
}

func TestBodyCaps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{MaxRequestBody: 64, MaxResponseBody: 1024}), p)
		client := &http.Client{}

		got, err := post(t, client, url, "big-request", `{"amount":5,"memo":"`+strings.Repeat("m", 100)+`"}`)
		require.NoError(t, err)
		requireProblem(t, got, http.StatusRequestEntityTooLarge)
		require.Zero(t, p.calls.Load())

		for i := range 2 {
			got, err = post(t, client, url, "big-response", `{"amount":999}`)
			require.NoError(t, err)
			requireProblem(t, got, http.StatusInternalServerError)
			require.Contains(t, got.body, "larger than 1024 bytes")
			require.Equal(t, int32(i+1), p.calls.Load(), "nothing stored: the retry runs again")
		}
		total, _ := b.balance(t)
		require.Zero(t, total, "the write of an oversized response was rolled back")
	})
}

// TestCommitFails: when the commit fails (here a deferred constraint, checked at COMMIT),
// the client gets 503 and nothing is stored, so the retry runs the handler again.
// PostgreSQL only: MariaDB has no deferred constraints to make a commit fail on demand.
func TestCommitFails(t *testing.T) {
	t.Parallel()
	b := newBackend(t, "pgx")
	ctx := context.Background()
	table := pgx.Identifier{tableName("deferred")}.Sanitize()
	_, err := b.pool.Exec(ctx, `CREATE TABLE `+table+` (id int, UNIQUE (id) DEFERRABLE INITIALLY DEFERRED); INSERT INTO `+table+` VALUES (1)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+table) })

	var calls atomic.Int32
	m := newMiddleware(t, b, inboxhttp.Config{Logger: slog.New(slog.DiscardHandler)})
	url := serve(t, m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		tx, _ := inbox.TxFromContext[pgx.Tx](r.Context())
		// The first call inserts a duplicate id: accepted now, refused at COMMIT.
		if _, err := tx.Exec(r.Context(), `INSERT INTO `+table+` VALUES ($1)`, n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, "call %d", n)
	}))
	client := &http.Client{}
	got, err := post(t, client, url, "doomed", `{}`)
	require.NoError(t, err)
	requireProblem(t, got, http.StatusServiceUnavailable)
	require.Equal(t, "1", got.header.Get("Retry-After"))

	got, err = post(t, client, url, "doomed", `{}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, got.status, got.body)
	require.False(t, got.replayed(), "nothing was stored: the retry ran the handler")
	require.Equal(t, "call 2", got.body)
	got, err = post(t, client, url, "doomed", `{}`)
	require.NoError(t, err)
	require.True(t, got.replayed())
	require.Equal(t, "call 2", got.body)
}

// TestKeyProcessedElsewhere: a key of the route's consumer that another inbox caller
// processed (Process, which stores no response) is answered with a 500, not replayed as
// garbage and not run again.
func TestKeyProcessedElsewhere(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ib, err := inbox.New(inbox.Config{Store: b.store, Consumer: "http"})
		require.NoError(t, err)
		_, err = ib.Process(context.Background(), "POST /payments", "taken", func(context.Context) error { return nil })
		require.NoError(t, err)
		p := &payments{b: b}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{Logger: slog.New(slog.DiscardHandler)}), p)
		got, err := post(t, &http.Client{}, url, "taken", `{"amount":1}`)
		require.NoError(t, err)
		requireProblem(t, got, http.StatusInternalServerError)
		require.Zero(t, p.calls.Load())
	})
}

// TestFlushAndHijackUnsupported: the handler's writer cannot flush or hijack (its
// response must be whole before it is stored); a handler that tries is told so, and what
// it wrote is still stored and replayed whole.
func TestFlushAndHijackUnsupported(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		type seen struct {
			isFlusher, isHijacker bool
			flushErr, hijackErr   error
		}
		calls := make(chan seen, 2)
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var s seen
			_, s.isFlusher = w.(http.Flusher)
			_, s.isHijacker = w.(http.Hijacker)
			rc := http.NewResponseController(w)
			_, _ = w.Write([]byte("part 1, "))
			s.flushErr = rc.Flush()
			_, _, s.hijackErr = rc.Hijack()
			_, _ = w.Write([]byte("part 2"))
			calls <- s
		}))
		for range 2 {
			got, err := post(t, &http.Client{}, url, "stream", `{}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, got.status)
			require.Equal(t, "part 1, part 2", got.body)
		}
		require.Len(t, calls, 1, "the second request was a replay")
		s := <-calls
		require.False(t, s.isFlusher)
		require.False(t, s.isHijacker)
		require.ErrorIs(t, s.flushErr, http.ErrNotSupported)
		require.ErrorIs(t, s.hijackErr, http.ErrNotSupported)
	})
}
