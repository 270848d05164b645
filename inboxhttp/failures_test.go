package inboxhttp_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// What is not stored: panics, 5xx, oversized bodies, failed commits, streams.

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
			requirePermanent(t, got, http.StatusInternalServerError, inboxhttp.ProblemPermanent)
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
	table := pgx.Identifier{sqltest.Name("deferred")}.Sanitize()
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
	requireProblemOf(t, got, http.StatusServiceUnavailable, inboxhttp.ProblemTransient)
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
		requirePermanent(t, got, http.StatusInternalServerError, inboxhttp.ProblemPermanent)
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
