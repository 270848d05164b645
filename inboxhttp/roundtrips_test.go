package inboxhttp_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/inboxhttp"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

var registerCountedDial sync.Once
var mysqlRoundTrips = &sqltest.RoundTrips{}

// TestRoundTrips counts the database round trips of one request, over one connection:
// a first request (claim, the handler's INSERT, the commit with the stored response)
// and a replay (claim, read of the stored response). The figures are the minimum each
// store can do today; a change that adds one fails here.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		backend       string
		first, replay int64
		// why explains the figures, one part per round trip.
		why string
	}{
		{backend: "pgx", first: 3, replay: 2,
			why: "first: BEGIN+INSERT key (folded); handler INSERT; UPDATE output + COMMIT (pipelined). replay: BEGIN+INSERT fails; ROLLBACK+SELECT stored"},
		{backend: "mariadb", first: 7, replay: 5,
			why: "first: SET TRANSACTION (MySQLConfig.SessionIsolation saves it); START TRANSACTION; INSERT key; handler INSERT (prepare, execute: the DSN has no interpolateParams); UPDATE output; COMMIT " +
				"(the store's statements prepared once per connection). replay: SET TRANSACTION; START TRANSACTION; INSERT key fails; SELECT stored; ROLLBACK"},
	}
	for _, tt := range tests {
		t.Run(tt.backend, func(t *testing.T) {
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
				registerCountedDial.Do(func() {
					mysql.RegisterDialContext("counted", func(ctx context.Context, addr string) (net.Conn, error) {
						return mysqlRoundTrips.Dial(ctx, "tcp", addr)
					})
				})
				rt = mysqlRoundTrips
				cfg, err := mysql.ParseDSN(testDSN("mariadb"))
				require.NoError(t, err)
				cfg.Net = "counted"
				b = openBackend(t, "mariadb", sqltest.Name("inbox"), sqltest.Name("ledger"), true, nil, cfg.FormatDSN())
			}
			p := &payments{b: b}
			url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), p)
			client := &http.Client{}
			// Warm up: the connection, the statements the store and driver prepare.
			for _, key := range []string{"warm-1", "warm-1", "warm-2", "warm-2"} {
				_, err := post(t, client, url, key, `{"amount":1}`)
				require.NoError(t, err)
			}

			rt.N.Store(0)
			got, err := post(t, client, url, "counted", `{"amount":1}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, got.status)
			first := rt.N.Swap(0)
			got, err = post(t, client, url, "counted", `{"amount":1}`)
			require.NoError(t, err)
			require.True(t, got.replayed())
			replay := rt.N.Swap(0)
			t.Logf("%s: %d round trips for a first request, %d for a replay (%s)", tt.backend, first, replay, tt.why)
			require.Equal(t, tt.first, first, tt.why)
			require.Equal(t, tt.replay, replay, tt.why)
		})
	}
}
