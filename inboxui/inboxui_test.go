package inboxui_test

import (
	"context"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxui"
	"github.com/watermill-inbox/inbox/inboxui/internal/uitest"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// New refuses a page without an authorization func, or without a store, naming the
// field; and a path that is not a mount point.
func TestNewRefusesAnOpenPage(t *testing.T) {
	t.Parallel()
	store := uitest.SQLite(t, t.TempDir()+"/inbox.db")
	allow := func(*http.Request) (string, error) { return "x", nil }
	for _, tc := range []struct {
		name string
		cfg  inboxui.Config
		want string
	}{
		{"no authorization", inboxui.Config{Store: store}, "Authorize is nil"},
		{"no store", inboxui.Config{Authorize: allow}, "Store is nil"},
		{"path without a slash", inboxui.Config{Store: store, Authorize: allow, Path: "/ops"}, `Path is "/ops"`},
		{"negative limit", inboxui.Config{Store: store, Authorize: allow, AttemptLimit: -1}, "AttemptLimit is -1"},
		{"not an origin", inboxui.Config{Store: store, Authorize: allow, TrustedOrigins: []string{"ops.example.com/x"}}, "TrustedOrigins"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ui, err := inboxui.New(tc.cfg)
			require.Nil(t, ui)
			require.ErrorContains(t, err, "inboxui: invalid config: ")
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.Panics(t, func() { inboxui.BasicAuth("ops", "") }, "a password that lets anyone in")
}

// escaped is s as html/template writes it in HTML text.
func escaped(s string) string { return template.HTMLEscapeString(s) }

// The page shows, on every kind of store and through a TenantStore, each consumer's
// keys, its unfinished attempts and the offsets; what the tables hold is escaped, never
// markup; and a reset, reviewed and confirmed, changes the stored offset as shown.
func TestPageOnEveryStore(t *testing.T) {
	t.Parallel()
	for _, s := range uitest.Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			seeded := uitest.Seed(t, s)
			srv := serve(t, s.Store, inboxui.Config{})
			q := func() url.Values { return withTenant(nil, s.Tenant) }

			status, page := srv.get(t, mount, q())
			require.Equal(t, http.StatusOK, status, page)
			requireInert(t, page)
			require.Contains(t, page, escaped(uitest.EvilConsumer))
			require.Regexp(t, `<td class="name">billing</td>\s*<td class="n">3</td>`, page, "billing's keys")
			require.Contains(t, page, `<section id="consumers">`)
			if s.Attempts {
				require.Contains(t, page, "unfinished attempts")
				require.Regexp(t, `<td class="name">`+escapeRegexp(escaped(uitest.EvilConsumer))+`</td>\s*<td class="n">1</td>\s*<td>.*</td>\s*<td class="n"><a href="[^"]*attempts\?[^"]*">1</a></td>`, page,
					"the evil consumer's key (its dead attempt's key is not committed) and its unfinished attempt")
			} else {
				require.NotContains(t, page, "unfinished attempts", "a store that lists no attempts shows no column for them")
			}
			if !s.Offsets {
				require.NotContains(t, page, `<section id="offsets">`, "a store without offsets shows no offsets section")
				return
			}
			require.Contains(t, page, `<section id="offsets">`)
			require.Contains(t, page, escaped(uitest.EvilTopic))

			if s.Attempts {
				status, list := srv.get(t, mount+"attempts", withTenant(url.Values{"consumer": {uitest.EvilConsumer}}, s.Tenant))
				require.Equal(t, http.StatusOK, status, list)
				requireInert(t, list)
				require.Contains(t, list, escaped(uitest.EvilKey+"-dead"))
			}

			// Reset EvilConsumer's offset on EvilTopic: the form, the review, the POST.
			ref := withTenant(url.Values{"consumer": {uitest.EvilConsumer}, "topic": {uitest.EvilTopic}, "partition": {"0"}}, s.Tenant)
			status, form := srv.get(t, mount+"offsets/reset", ref)
			require.Equal(t, http.StatusOK, status, form)
			requireInert(t, form)
			require.Contains(t, form, `id="review"`)
			require.NotContains(t, form, `method="post"`, "the first step changes nothing")
			ref.Set("to", "7")
			status, review := srv.get(t, mount+"offsets/reset", ref)
			require.Equal(t, http.StatusOK, status, review)
			requireInert(t, review)
			require.Contains(t, review, `<form method="post"`)
			require.Contains(t, review, `name="from" value="42"`)
			ctx := s.Context(context.Background())
			require.Equal(t, seeded.EvilOffset, offsetOf(t, ctx, s.Store, uitest.EvilConsumer, uitest.EvilTopic, 0), "a review changes nothing")

			post := withTenant(url.Values{"consumer": {uitest.EvilConsumer}, "topic": {uitest.EvilTopic}, "partition": {"0"},
				"from": {strconv.FormatInt(seeded.EvilOffset, 10)}, "to": {"7"}}, s.Tenant)
			status, done, _ := srv.do(t, request{method: http.MethodPost, path: mount + "offsets/reset", form: post})
			require.Equal(t, http.StatusOK, status, done)
			requireInert(t, done)
			require.Contains(t, done, "was 42 and is 7 now")
			require.Equal(t, int64(7), offsetOf(t, ctx, s.Store, uitest.EvilConsumer, uitest.EvilTopic, 0))
			require.Contains(t, srv.log.String(), `msg="inboxui: action" action=offsets/reset operator=ops`)

			// The same confirmation again: the offset moved since (it is 7, not 42).
			status, again, _ := srv.do(t, request{method: http.MethodPost, path: mount + "offsets/reset", form: post})
			require.Equal(t, http.StatusConflict, status, again)
			require.Contains(t, again, "moved since")
			require.Equal(t, int64(7), offsetOf(t, ctx, s.Store, uitest.EvilConsumer, uitest.EvilTopic, 0))

			// A negative offset deletes the row.
			post.Set("from", "7")
			post.Set("to", "-1")
			status, deleted, _ := srv.do(t, request{method: http.MethodPost, path: mount + "offsets/reset", form: post})
			require.Equal(t, http.StatusOK, status, deleted)
			require.Equal(t, int64(-1), offsetOf(t, ctx, s.Store, uitest.EvilConsumer, uitest.EvilTopic, 0))
			require.Equal(t, seeded.BillingOffset, offsetOf(t, ctx, s.Store, "billing", "orders", 3), "the other partition is untouched")
		})
	}
}

// requireInert checks that page holds none of the hostile names as markup.
func requireInert(t *testing.T, page string) {
	t.Helper()
	for _, raw := range []string{"<script>window.pwned", "<img src=x", "<b>bold</b>", "<i>evil</i>", `"><script>`} {
		require.NotContains(t, page, raw, "markup from the tables reached the page")
	}
	require.NotContains(t, strings.ToLower(page), "<script", "the page runs no script at all")
}

func escapeRegexp(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `.`, `\.`, `*`, `\*`, `+`, `\+`, `?`, `\?`, `(`, `\(`, `)`, `\)`, `[`, `\[`, `]`, `\]`, `{`, `\{`, `}`, `\}`, `|`, `\|`, `^`, `\^`, `$`, `\$`)
	return r.Replace(s)
}

// A TenantStore's page without a tenant lists the tenants (escaped), sums the
// consumers of every tenant, and asks for a tenant before showing offsets.
func TestPageAcrossTenants(t *testing.T) {
	t.Parallel()
	ts := uitest.Tenants(t)
	uitest.Seed(t, uitest.Store{Name: "tenants", Store: ts, Tenant: uitest.Tenant, Attempts: true, Offsets: true})
	uitest.Seed(t, uitest.Store{Name: "tenants", Store: ts, Tenant: uitest.EvilTenant, Attempts: true, Offsets: true})
	srv := serve(t, ts, inboxui.Config{})
	status, page := srv.get(t, mount, nil)
	require.Equal(t, http.StatusOK, status, page)
	requireInert(t, page)
	require.Contains(t, page, `<section id="tenants">`)
	require.Contains(t, page, ">"+escaped(uitest.EvilTenant)+"</a>")
	require.Contains(t, page, "?tenant="+url.QueryEscape(uitest.EvilTenant))
	require.Regexp(t, `<td class="name">billing</td>\s*<td class="n">6</td>`, page, "3 keys in each tenant")
	require.Contains(t, page, "Offsets are kept per tenant: choose one.")
	require.Contains(t, page, "Choose a tenant to list them one by one.")

	status, evil := srv.get(t, mount, url.Values{"tenant": {uitest.EvilTenant}})
	require.Equal(t, http.StatusOK, status, evil)
	requireInert(t, evil)
	require.Contains(t, evil, `<b id="current-tenant">`+escaped(uitest.EvilTenant)+`</b>`)
	require.Regexp(t, `<td class="name">billing</td>\s*<td class="n">3</td>`, evil)

	status, unknown := srv.get(t, mount, url.Values{"tenant": {"nobody"}})
	require.Equal(t, http.StatusOK, status, unknown)
	require.Contains(t, unknown, "unknown tenant", "the sections say why they are empty")
}

// Every route, GET and POST, a path the page does not have included, is refused
// without credentials (401, with a Basic challenge), with wrong ones (401), and when
// Authorize refuses the user (403); nothing is read or changed.
func TestEveryRouteNeedsAuthorization(t *testing.T) {
	t.Parallel()
	store := uitest.SQLite(t, t.TempDir()+"/inbox.db")
	s := uitest.Store{Name: "sqlite", Store: store, Attempts: true, Offsets: true}
	seeded := uitest.Seed(t, s)
	srv := serve(t, store, inboxui.Config{})
	reset := url.Values{"consumer": {"billing"}, "topic": {"orders"}, "partition": {"3"}, "from": {"1000"}, "to": {"0"}}
	routes := []request{
		{method: http.MethodGet, path: mount},
		{method: http.MethodGet, path: mount + "attempts", form: url.Values{"consumer": {"billing"}}},
		{method: http.MethodGet, path: mount + "offsets/reset", form: url.Values{"consumer": {"billing"}, "topic": {"orders"}, "partition": {"3"}, "to": {"0"}}},
		{method: http.MethodPost, path: mount + "offsets/reset", form: reset},
		{method: http.MethodGet, path: mount + "no-such-page"},
		{method: http.MethodPost, path: mount},
	}
	for _, route := range routes {
		t.Run(route.method+" "+route.path, func(t *testing.T) {
			for _, who := range []struct {
				name, user, pass string
				status           int
			}{
				{"no credentials", "-", "", http.StatusUnauthorized},
				{"wrong password", operator, "guess", http.StatusUnauthorized},
				{"refused user", "banned", password, http.StatusForbidden},
			} {
				req := route
				req.user, req.pass = who.user, who.pass
				status, body, hdr := srv.do(t, req)
				require.Equal(t, who.status, status, "%s: %s", who.name, body)
				require.NotContains(t, body, "billing", "%s: nothing of the tables is shown", who.name)
				if who.status == http.StatusUnauthorized {
					require.Equal(t, `Basic realm="inbox", charset="UTF-8"`, hdr.Get("WWW-Authenticate"))
				}
			}
		})
	}
	require.Equal(t, seeded.BillingOffset, offsetOf(t, context.Background(), store, "billing", "orders", 3), "no refused POST changed the offset")
	require.Contains(t, srv.log.String(), "why=\"not authorized\"")

	// Authorized, the same routes answer (a GET-only path refuses a POST: 405).
	want := []int{http.StatusOK, http.StatusOK, http.StatusOK, http.StatusOK, http.StatusNotFound, http.StatusMethodNotAllowed}
	for i, route := range routes {
		status, body, hdr := srv.do(t, route)
		require.Equal(t, want[i], status, "%s %s: %s", route.method, route.path, body)
		require.Contains(t, hdr.Get("Content-Security-Policy"), "default-src 'none'")
	}
	require.Equal(t, int64(0), offsetOf(t, context.Background(), store, "billing", "orders", 3), "the authorized POST reset it")
}

// Every action refuses a request from another origin, by the browser's Sec-Fetch-Site
// header or, without it, by Origin against Host; a trusted origin may act.
func TestActionsRefuseCrossOrigin(t *testing.T) {
	t.Parallel()
	store := uitest.SQLite(t, t.TempDir()+"/inbox.db")
	uitest.Seed(t, uitest.Store{Name: "sqlite", Store: store, Attempts: true, Offsets: true})
	srv := serve(t, store, inboxui.Config{TrustedOrigins: []string{"https://ops.example.com"}})
	actions := []string{mount + "offsets/reset"} // every POST route of the page
	form := func(from, to string) url.Values {
		return url.Values{"consumer": {"billing"}, "topic": {"orders"}, "partition": {"3"}, "from": {from}, "to": {to}}
	}
	for _, path := range actions {
		for _, tc := range []struct {
			name   string
			header map[string]string
		}{
			{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}},
			{"same-site, another origin", map[string]string{"Sec-Fetch-Site": "same-site"}},
			{"no Sec-Fetch-Site, Origin of another host", map[string]string{"Sec-Fetch-Site": "", "Origin": "http://evil.example"}},
			{"Origin of another host beside a forged Host match", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": srv.URL}},
		} {
			status, body, _ := srv.do(t, request{method: http.MethodPost, path: path, form: form("1000", "5"), header: tc.header})
			require.Equal(t, http.StatusForbidden, status, "%s %s: %s", path, tc.name, body)
			require.Contains(t, body, "cross-origin")
		}
	}
	require.Equal(t, int64(1000), offsetOf(t, context.Background(), store, "billing", "orders", 3), "no cross-origin POST changed the offset")
	require.Contains(t, srv.log.String(), `why="cross-origin request"`)

	status, body, _ := srv.do(t, request{method: http.MethodPost, path: mount + "offsets/reset", form: form("1000", "5"),
		header: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://ops.example.com"}})
	require.Equal(t, http.StatusOK, status, body)
	status, body, _ = srv.do(t, request{method: http.MethodPost, path: mount + "offsets/reset", form: form("5", "6"),
		header: map[string]string{"Sec-Fetch-Site": "", "Origin": ""}})
	require.Equal(t, http.StatusOK, status, "a client that is no browser (no Sec-Fetch-Site, no Origin) is not cross-origin: %s", body)
	require.Equal(t, int64(6), offsetOf(t, context.Background(), store, "billing", "orders", 3))
}

var _ inbox.Store = (*sqlitestore.Store)(nil)
