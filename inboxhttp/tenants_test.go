package inboxhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// Requests of several tenants on one route: the tenant comes from a header
// (Config.Tenant), the TenantStore keeps each tenant's keys and responses in its own
// PostgreSQL schema, and the handler's unqualified writes land there.

var httpTenants = []string{"acme", "globex"}

// tenantBackend is a TenantStore over a schema per tenant of one pool, with a table
// "ledger" in each schema; balance reads one tenant's.
func tenantBackend(t *testing.T) (backend, func(t testing.TB, tenant string) (total, credits int)) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testDSN("postgres"))
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		sqltest.Unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
	}
	t.Cleanup(pool.Close)
	schemas := map[string]string{}
	for _, tenant := range httpTenants {
		s := sqltest.Name("t")
		schemas[tenant] = s
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{s}.Sanitize()+` CASCADE`)
		})
	}
	ts, err := inbox.NewTenantStore(inbox.TenantConfig{
		Lookup: func(_ context.Context, tenant string) (inbox.Tenant, error) {
			s, ok := schemas[tenant]
			if !ok {
				return inbox.Tenant{}, fmt.Errorf("%w: %q", inbox.ErrUnknownTenant, tenant)
			}
			store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Schema: s, SearchPath: true})
			return inbox.Tenant{Store: store}, err
		},
		Tenants: func(context.Context) ([]string, error) { return httpTenants, nil },
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ts.Close() })
	require.NoError(t, ts.CreateSchema(ctx))
	for _, s := range schemas {
		_, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{s, "ledger"}.Sanitize()+` (id serial PRIMARY KEY, amount int NOT NULL)`)
		require.NoError(t, err)
	}
	b := backend{name: "pgx-schemas", store: ts, pool: pool}
	b.credit = func(ctx context.Context, amount int) error {
		tx, err := inbox.RequireTx[pgx.Tx](ctx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO ledger (amount) VALUES ($1)`, amount) // the tenant's, by search_path
		return err
	}
	balance := func(t testing.TB, tenant string) (total, credits int) {
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT coalesce(sum(amount), 0), count(*) FROM `+pgx.Identifier{schemas[tenant], "ledger"}.Sanitize()).Scan(&total, &credits))
		return total, credits
	}
	return b, balance
}

func TestTenantFromTheRequest(t *testing.T) {
	t.Parallel()
	b, balance := tenantBackend(t)
	p := &payments{b: b}
	url := serve(t, newMiddleware(t, b, inboxhttp.Config{Tenant: inboxhttp.TenantFromHeader("X-Tenant-ID")}), p)
	client := &http.Client{}
	send := func(tenant, key, body string) reply {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
		if tenant != "" {
			req.Header.Set("X-Tenant-ID", tenant)
		}
		got, err := do(client, req)
		require.NoError(t, err)
		return got
	}

	// The same key in two tenants is two requests; a retry in one gets its own answer.
	first := send("acme", "k1", `{"amount":5}`)
	require.Equal(t, http.StatusCreated, first.status, first.body)
	other := send("globex", "k1", `{"amount":7}`)
	require.Equal(t, http.StatusCreated, other.status, other.body)
	require.False(t, other.replayed(), "another tenant's key of the same name")
	again := send("acme", "k1", `{"amount":5}`)
	require.True(t, again.replayed())
	require.Equal(t, first.body, again.body)
	require.Equal(t, [2]int{5, 1}, pair(balance(t, "acme")))
	require.Equal(t, [2]int{7, 1}, pair(balance(t, "globex")))

	// No tenant: 400; an unknown one: 404; neither runs the handler nor writes.
	requireProblem(t, send("", "k2", `{"amount":1}`), http.StatusBadRequest)
	got := send("initech", "k2", `{"amount":1}`)
	requireProblemOf(t, got, http.StatusNotFound, inboxhttp.ProblemPermanent) // docs/errors.md: do not retry
	require.Equal(t, int32(2), p.calls.Load())
	require.Equal(t, [2]int{5, 1}, pair(balance(t, "acme")))
}

func TestConflictIsPerTenant(t *testing.T) {
	t.Parallel()
	b, balance := tenantBackend(t)
	p := &payments{b: b, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
	m := newMiddleware(t, b, inboxhttp.Config{Tenant: inboxhttp.TenantFromHeader("X-Tenant-ID"), InFlight: inboxhttp.Conflict})
	url := serve(t, m, p)
	client := &http.Client{}
	send := func(tenant string) (reply, error) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":3}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", `"k1"`)
		req.Header.Set("X-Tenant-ID", tenant)
		return do(client, req)
	}
	done := make(chan reply, 2)
	go func() { r, _ := send("acme"); done <- r }()
	<-p.entered // acme's k1 is in flight
	busy, err := send("acme")
	require.NoError(t, err)
	requireProblem(t, busy, http.StatusConflict)
	go func() { r, _ := send("globex"); done <- r }()
	select {
	case <-p.entered: // globex's k1 is not acme's: it runs
	case r := <-done:
		close(p.hold)
		t.Fatalf("globex's request was answered %d without running: in-flight keys must be per tenant", r.status)
	}
	close(p.hold)
	for range 2 {
		require.Equal(t, http.StatusCreated, (<-done).status)
	}
	require.Equal(t, [2]int{3, 1}, pair(balance(t, "acme")))
	require.Equal(t, [2]int{3, 1}, pair(balance(t, "globex")))
}

func pair(a, b int) [2]int { return [2]int{a, b} }

// Issue 32, defect 2: a tenant function that fails otherwise than with ErrNoTenant (the
// tenant directory is down) got 400, and the client dropped the request for good. It is
// transient, as the Watermill middleware has it: 503 with Retry-After, and the retry
// goes through. A permanent one (inbox.MarkPermanent) gets 500; ErrUnknownTenant 404.
func TestTenantFuncFailures(t *testing.T) {
	t.Parallel()
	b, balance := tenantBackend(t)
	p := &payments{b: b}
	var fail atomic.Pointer[error] // the error the tenant function returns, if any
	url := serve(t, newMiddleware(t, b, inboxhttp.Config{Tenant: func(r *http.Request) (string, error) {
		if err := fail.Load(); err != nil {
			return "", *err
		}
		return inboxhttp.TenantFromHeader("X-Tenant-ID")(r)
	}}), p)
	client := &http.Client{}
	send := func() reply {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":5}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", `"k1"`)
		req.Header.Set("X-Tenant-ID", "acme")
		got, err := do(client, req)
		require.NoError(t, err)
		return got
	}
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		typ        string
		retryAfter string
	}{
		{"the directory is down", errors.New("tenant directory unreachable"), http.StatusServiceUnavailable, inboxhttp.ProblemTransient, "1"},
		{"a permanent failure", inbox.MarkPermanent(errors.New("the tenant claim is signed with a revoked key")), http.StatusInternalServerError, inboxhttp.ProblemPermanent, ""},
		{"an unknown tenant", fmt.Errorf("%w: no tenant at this host", inbox.ErrUnknownTenant), http.StatusNotFound, inboxhttp.ProblemPermanent, ""},
	} {
		fail.Store(&tc.err)
		got := send()
		requireProblemOf(t, got, tc.status, tc.typ)
		require.Equal(t, tc.retryAfter, got.header.Get("Retry-After"), tc.name)
		require.NotContains(t, got.body, "revoked", "the cause is logged, not sent")
	}
	fail.Store(nil)
	got := send()
	require.Equal(t, http.StatusCreated, got.status, "the retry, once the directory answers: %s", got.body)
	require.Equal(t, int32(1), p.calls.Load())
	require.Equal(t, [2]int{5, 1}, pair(balance(t, "acme")))
}
