package inboxhttp_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// TestRoundTrips counts the database round trips of one request, over one connection:
// a first request (claim, the handler's INSERT, the commit with the stored response)
// and a replay, answered from the read of a key the inbox remembers
// (inbox.Config.RecentKeys) or, with the hints off (a replay the process did not see
// first), through the claim; or, with the hints off and the replay marked as a retry
// (Config.ReplayHint, as for a response another process stored), from the read before
// the claim, which a first request marked as a retry pays as one round trip more. The
// figures are the minimum each store can do today; a change that adds one fails here.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, backend string
		recentKeys    int
		// sessionRC puts the sessions at READ COMMITTED through the DSN.
		sessionRC bool
		// hinted marks the replay as a retry (Config.ReplayHint), and sends a first
		// request marked so too, counted as hintedFirst.
		hinted                     bool
		first, replay, hintedFirst int64
		// why explains the figures, one part per round trip.
		why string
	}{
		{name: "pgx", backend: "pgx", first: 3, replay: 1,
			why: "first: BEGIN+INSERT key (folded); handler INSERT; UPDATE output + COMMIT (pipelined). replay of a remembered key: SELECT stored"},
		{name: "pgx-no-hints", backend: "pgx", recentKeys: -1, first: 3, replay: 2,
			why: "first: as above. replay: BEGIN+INSERT fails; ROLLBACK+SELECT stored"},
		{name: "pgx-replay-hint", backend: "pgx", recentKeys: -1, hinted: true, first: 3, replay: 1, hintedFirst: 4,
			why: "first: as above. replay marked as a retry, its key not remembered: SELECT stored. a first request marked as a retry: SELECT stored (no row); then as a first request"},
		{name: "mariadb", backend: "mariadb", first: 7, replay: 1,
			why: "first: SET TRANSACTION (the session is at REPEATABLE READ); START TRANSACTION; INSERT key; handler INSERT (prepare, execute: the DSN has no interpolateParams); UPDATE output; COMMIT " +
				"(the store's statements prepared once per connection). replay of a remembered key: SELECT stored (prepared)"},
		{name: "mariadb-no-hints", backend: "mariadb", recentKeys: -1, first: 7, replay: 5,
			why: "first: as above. replay: SET TRANSACTION; START TRANSACTION; INSERT key fails; SELECT stored; ROLLBACK"},
		{name: "mariadb-replay-hint", backend: "mariadb", recentKeys: -1, hinted: true, first: 7, replay: 1, hintedFirst: 8,
			why: "first: as above. replay marked as a retry, its key not remembered: SELECT stored (prepared). a first request marked as a retry: SELECT stored (no row); then as a first request"},
		{name: "mariadb-session-rc", backend: "mariadb", recentKeys: -1, sessionRC: true, first: 6, replay: 4,
			why: "the DSN sets tx_isolation=READ-COMMITTED, which the store found on its first claim: no SET TRANSACTION. first: START TRANSACTION; INSERT key; handler INSERT (prepare, execute); UPDATE output; COMMIT. " +
				"replay: START TRANSACTION; INSERT key fails; SELECT stored; ROLLBACK"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := &sqltest.RoundTrips{}
			var b backend
			switch tt.backend {
			case "pgx":
				b = openBackend(t, "pgx", sqltest.Name("inbox"), sqltest.Name("ledger"), true, func(c *pgxpool.Config) {
					c.MaxConns = 1
					c.ConnConfig.DialFunc = rt.Dial
					c.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
				}, "")
			case "mariadb":
				// A dial of its own per case: the cases run in parallel.
				mysql.RegisterDialContext("counted-"+tt.name, func(ctx context.Context, addr string) (net.Conn, error) {
					return rt.Dial(ctx, "tcp", addr)
				})
				cfg, err := mysql.ParseDSN(testDSN("mariadb"))
				require.NoError(t, err)
				cfg.Net = "counted-" + tt.name
				if tt.sessionRC {
					cfg.Params = map[string]string{"tx_isolation": "'READ-COMMITTED'"}
				}
				b = openBackend(t, "mariadb", sqltest.Name("inbox"), sqltest.Name("ledger"), true, nil, cfg.FormatDSN())
			}
			p := &payments{b: b}
			ib, err := inbox.New(inbox.Config{Store: b.store, Consumer: "http", RecentKeys: tt.recentKeys})
			require.NoError(t, err)
			cfg := inboxhttp.Config{Inbox: ib}
			if tt.hinted {
				cfg.ReplayHint = isRetry
			}
			url := serve(t, newMiddleware(t, b, cfg), p)
			client := &http.Client{}
			send := func(key string, retry bool) reply {
				sendOne := post
				if retry {
					sendOne = postRetry
				}
				got, err := sendOne(t, client, url, key, `{"amount":1}`)
				require.NoError(t, err)
				return got
			}
			// Warm up: the connection, the statements the store and driver prepare.
			for i, key := range []string{"warm-1", "warm-1", "warm-2", "warm-2"} {
				send(key, tt.hinted && i%2 == 1) // the replays as counted below
			}

			rt.N.Store(0)
			got := send("counted", false)
			require.Equal(t, http.StatusCreated, got.status)
			first := rt.N.Swap(0)
			got = send("counted", tt.hinted)
			require.True(t, got.replayed())
			replay := rt.N.Swap(0)
			t.Logf("%s: %d round trips for a first request, %d for a replay (%s)", tt.name, first, replay, tt.why)
			require.Equal(t, tt.first, first, tt.why)
			require.Equal(t, tt.replay, replay, tt.why)
			if tt.hinted {
				got = send("counted-hinted-first", true)
				require.Equal(t, http.StatusCreated, got.status)
				require.False(t, got.replayed())
				require.Equal(t, tt.hintedFirst, rt.N.Swap(0), tt.why)
				require.Equal(t, int32(4), p.calls.Load(), "the handler ran once per key: 2 warm-up keys, counted, counted-hinted-first")
			}
		})
	}
}
