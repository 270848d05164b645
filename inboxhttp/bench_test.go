package inboxhttp_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
	"github.com/watermill-inbox/inbox/internal/benchload"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// The benchmarks pair every candidate with its baseline op by op in one process
// (benchload.Paired), as the root package's do; see docs/benchmarks.md. b.N is the ops of
// each side. They work at -benchtime=1x, as CI runs them; no timing is asserted.

// httpTarget is one database with the benchmark tables, a plain server (the handler in
// its own transaction) and an inboxhttp server (the handler in the inbox transaction).
type httpTarget struct {
	tgt          *benchload.Target
	plain, inbox string
	// empty answers the same 201 without touching the database: the HTTP floor.
	empty string
	// handwritten sends inbox's SQL for a new request, written by hand
	// (benchload.HandWrittenHTTP): the floor of inboxhttp's SQL, without the library.
	handwritten string
	// multi sends the same SQL with the fewest round trips the server allows, which
	// database/sql does not let a library send (benchload.HandWrittenHTTPMulti, MariaDB
	// and MySQL); on pgx, the same round trips as handwritten with the response's UPDATE
	// and the COMMIT as one simple query instead of a pipeline
	// (benchload.HandWrittenHTTPSimple).
	multi  string
	client *http.Client
}

// newHTTPTarget opens the flavour's database: pgx, mariadb, or a variant of either:
// mariadb-session (the inbox's MySQLStore with SessionIsolation, which saves the SET
// TRANSACTION round trip), mariadb-rc (the DSN puts every session at READ COMMITTED, both
// sides; the store finds it and sends no SET TRANSACTION), pgx-nohints and
// mariadb-nohints (inbox.Config.RecentKeys off: a replay goes through the claim, as one
// the process did not see first does), pgx-nohints-hint and mariadb-nohints-hint (those,
// with replays marked as retries by a header and Config.ReplayHint reading it); variants
// combine (mariadb-rc-nohints).
func newHTTPTarget(b *testing.B, flavour string) *httpTarget {
	b.Helper()
	ctx := context.Background()
	variant := ""
	if base, v, ok := strings.Cut(flavour, "-"); ok {
		flavour, variant = base, v
	}
	variants := map[string]bool{}
	for _, v := range strings.Split(variant, "-") {
		variants[v] = true
	}
	session := variants["session"]
	if variants["rc"] {
		_, dsn := benchload.DSN(flavour)
		cfg, err := mysql.ParseDSN(dsn)
		require.NoError(b, err)
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["tx_isolation"] = "'READ-COMMITTED'"
		b.Setenv("INBOX_MARIADB_DSN", cfg.FormatDSN())
	}
	variable, _ := benchload.DSN(flavour)
	pool, db, closeFn, err := benchload.Open(ctx, flavour, false)
	if err != nil {
		sqltest.Unavailable(b, flavour, variable, err)
	}
	b.Cleanup(closeFn)
	suffix := fmt.Sprintf("%d_%08x_h", time.Now().UnixNano()%1e9, rand.Uint32())
	tgt, err := benchload.NewTarget(ctx, flavour, pool, db, 1, suffix, "")
	if tgt != nil {
		b.Cleanup(func() { _ = tgt.Drop(context.Background(), true) })
	}
	require.NoError(b, err)

	reply := func(w http.ResponseWriter, key string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%q,"status":"applied"}`, key)
	}
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		if err := tgt.Baseline(r.Context(), key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, key)
	}))
	b.Cleanup(plain.Close)
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		reply(w, r.Header.Get("Idempotency-Key"))
	}))
	b.Cleanup(empty.Close)
	handwritten := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key, _ := inboxhttp.IdempotencyKey(r, nil)
		body := fmt.Sprintf(`{"id":%q,"status":"applied"}`, key)
		// What inboxhttp stores for it: version, status, one header, the body.
		const header = "\x01\x00\xc9\x01\x0cContent-Type\x10application/json"
		output := append([]byte(header), body...)
		stored, replayed, err := tgt.HandWrittenHTTP(r.Context(), key, output)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		case replayed: // what inboxhttp sends: the stored body, marked
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(stored[len(header):])
		default:
			reply(w, key)
		}
	}))
	b.Cleanup(handwritten.Close)
	multi := ""
	if flavour == "pgx" {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			key, _ := inboxhttp.IdempotencyKey(r, nil)
			body := fmt.Sprintf(`{"id":%q,"status":"applied"}`, key)
			const header = "\x01\x00\xc9\x01\x0cContent-Type\x10application/json"
			if err := tgt.HandWrittenHTTPSimple(r.Context(), key, append([]byte(header), body...)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			reply(w, key)
		}))
		b.Cleanup(srv.Close)
		multi = srv.URL
	} else {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			key, _ := inboxhttp.IdempotencyKey(r, nil)
			body := fmt.Sprintf(`{"id":%q,"status":"applied"}`, key)
			const header = "\x01\x00\xc9\x01\x0cContent-Type\x10application/json"
			if err := tgt.HandWrittenHTTPMulti(r.Context(), key, append([]byte(header), body...)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			reply(w, key)
		}))
		b.Cleanup(srv.Close)
		multi = srv.URL
	}
	ib := tgt.Inbox
	if session {
		store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: tgt.InboxTable, SessionIsolation: true})
		require.NoError(b, err)
		ib, err = inbox.New(inbox.Config{Store: store})
		require.NoError(b, err)
	}
	if variants["nohints"] {
		ib, err = inbox.New(inbox.Config{Store: tgt.Store, RecentKeys: -1})
		require.NoError(b, err)
	}
	cfg := inboxhttp.Config{Inbox: ib, Consumer: "bench"}
	if variants["hint"] {
		cfg.ReplayHint = isRetry
	}
	m, err := inboxhttp.New(cfg)
	require.NoError(b, err)
	withInbox := httptest.NewServer(m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key, _ := inboxhttp.IdempotencyKey(r, nil)
		if err := tgt.InTx(r.Context(), key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, key)
	})))
	b.Cleanup(withInbox.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections)
	return &httpTarget{tgt: tgt, plain: plain.URL, inbox: withInbox.URL, empty: empty.URL, handwritten: handwritten.URL, multi: multi, client: client}
}

// op returns the Op that POSTs to url with the key, expecting 201 (replayed or not).
func (h *httpTarget) op(url string, replayed bool) benchload.Op {
	return func(ctx context.Context, key string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"amount":1}`))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
		if replayed { // a client's retry says so (the -hint flavours read it)
			req.Header.Set(retryHeader, "1")
		}
		resp, err := h.client.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		switch {
		case err != nil:
			return err
		case resp.StatusCode != http.StatusCreated:
			return fmt.Errorf("%s: %d %s", url, resp.StatusCode, body)
		case (resp.Header.Get("Idempotent-Replayed") == "true") != replayed:
			return fmt.Errorf("%s: key %s: replayed is %q, want %v", url, key, resp.Header.Get("Idempotent-Replayed"), replayed)
		}
		return nil
	}
}

var (
	httpFlavours   = []string{"pgx", "mariadb", "mariadb-session", "mariadb-rc"}
	replayFlavours = []string{"pgx", "pgx-nohints", "pgx-nohints-hint", "mariadb", "mariadb-nohints", "mariadb-nohints-hint", "mariadb-rc", "mariadb-rc-nohints"}
)

// BenchmarkHTTP: a POST whose handler does one UPDATE, behind inboxhttp (the UPDATE in the
// inbox transaction, the response stored with the key) against the same handler doing
// the UPDATE in its own transaction, every request with a new key. The ratio is inbox
// over plain.
func BenchmarkHTTP(b *testing.B) {
	for _, flavour := range httpFlavours {
		for _, workers := range []int{1, 8, 16} {
			b.Run(fmt.Sprintf("%s/workers=%d", flavour, workers), func(b *testing.B) {
				h := newHTTPTarget(b, flavour)
				b.ResetTimer()
				ab, err := benchload.Paired(context.Background(), workers, b.N, 0, h.op(h.plain, false), h.op(h.inbox, false))
				require.NoError(b, err)
				b.ReportMetric(ab.A.Rate(), "plain/s")
				b.ReportMetric(ab.B.Rate(), "inbox/s")
				b.ReportMetric(ab.Ratio(), "ratio")
			})
		}
	}
}

// BenchmarkHTTPFloor splits BenchmarkHTTP's ratio in two: inboxhttp against the same SQL
// written by hand (the library's own cost on the HTTP path), and that SQL against the
// plain handler (the floor of the SQL inboxhttp must send: the key's row, the stored
// response and, on MariaDB and MySQL, the round trips database/sql cannot fold). On
// MariaDB a third pair, multi/plain, is the same SQL with the round trips folded as
// database/sql does not allow (benchload.HandWrittenHTTPMulti): what the floor would be
// if it did; on pgx, simple/handwritten compares the response's UPDATE and the COMMIT
// sent as one simple query with the pipeline the store sends (issue 31).
func BenchmarkHTTPFloor(b *testing.B) {
	for _, flavour := range []string{"pgx", "mariadb", "mariadb-rc"} {
		for _, workers := range []int{1, 8, 16} {
			b.Run(fmt.Sprintf("%s/workers=%d", flavour, workers), func(b *testing.B) {
				h := newHTTPTarget(b, flavour)
				b.ResetTimer()
				lib, err := benchload.Paired(context.Background(), workers, b.N, 0, h.op(h.handwritten, false), h.op(h.inbox, false))
				require.NoError(b, err)
				sql, err := benchload.Paired(context.Background(), workers, b.N, 0, h.op(h.plain, false), h.op(h.handwritten, false))
				require.NoError(b, err)
				b.ReportMetric(lib.Ratio(), "inbox/handwritten")
				b.ReportMetric(sql.Ratio(), "handwritten/plain")
				if strings.HasPrefix(flavour, "pgx") {
					simple, err := benchload.Paired(context.Background(), workers, b.N, 0, h.op(h.handwritten, false), h.op(h.multi, false))
					require.NoError(b, err)
					b.ReportMetric(simple.Ratio(), "simple/handwritten")
				} else {
					multi, err := benchload.Paired(context.Background(), workers, b.N, 0, h.op(h.plain, false), h.op(h.multi, false))
					require.NoError(b, err)
					b.ReportMetric(multi.Ratio(), "multi/plain")
				}
			})
		}
	}
}

// BenchmarkHTTPReplay: replayed responses against first requests through inboxhttp. The
// first-request side queues its keys; the replay side sends a queued key again. The
// floor variant pairs the replays with a handler that answers without the database, to
// show how much of a replay is the HTTP exchange itself (ratio replay over floor). The
// handwritten variant (pgx and MariaDB) is first and replay both by inboxhttp's SQL
// written by hand (benchload.HandWrittenHTTP), a replay through the claim: the floor of
// the replays the Inbox does not remember (the -nohints flavours).
func BenchmarkHTTPReplay(b *testing.B) {
	for _, flavour := range replayFlavours {
		for _, workers := range []int{1, 16} {
			against := []string{"first", "floor"}
			if !strings.Contains(flavour, "-nohints") {
				against = append(against, "handwritten")
			}
			for _, against := range against {
				b.Run(fmt.Sprintf("%s/workers=%d/%s", flavour, workers, against), func(b *testing.B) {
					benchmarkReplay(b, newHTTPTarget(b, flavour), workers, against)
				})
			}
		}
	}
}

func benchmarkReplay(b *testing.B, h *httpTarget, workers int, against string) {
	ctx := context.Background()
	floor := against == "floor"
	url := h.inbox
	if against == "handwritten" {
		url = h.handwritten
	}
	done := make(chan string, b.N+workers+b.N)
	firstOp := h.op(url, false)
	first := func(ctx context.Context, key string) error {
		err := firstOp(ctx, key)
		if err == nil {
			done <- key
		}
		return err
	}
	seeds := workers
	if floor { // the replays need keys processed beforehand
		seeds += b.N
	}
	for i := range seeds {
		require.NoError(b, first(ctx, fmt.Sprintf("seed-%d-%d", i, rand.Uint32())))
	}
	replayOp := h.op(url, true)
	replay := func(ctx context.Context, _ string) error { return replayOp(ctx, <-done) }
	a, name := first, "first"
	if floor {
		a, name = h.op(h.empty, false), "floor"
	}
	b.ResetTimer()
	ab, err := benchload.Paired(ctx, workers, b.N, 0, a, replay)
	require.NoError(b, err)
	b.StopTimer()
	applied, err := h.tgt.Applied(ctx)
	require.NoError(b, err)
	wantApplied := int64(seeds)
	if !floor {
		wantApplied += int64(ab.A.Ops)
	}
	require.Equal(b, wantApplied, applied, "a replay must not run the handler")
	b.ReportMetric(ab.A.Rate(), name+"/s")
	b.ReportMetric(ab.B.Rate(), "replay/s")
	b.ReportMetric(ab.Ratio(), "ratio")
}
