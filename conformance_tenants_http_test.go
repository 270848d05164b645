package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
	"github.com/watermill-inbox/inbox/outbox"
)

// inboxhttp behind a TenantStore, on every tenant flavour: the same key in two tenants,
// a request without a tenant or with an unknown one, a tenant function that fails (the
// directory down) and a Lookup that fails or panics, each answered as docs/errors.md
// says.
func exerciseTenantHTTP(t *testing.T, f storeFlavour) {
	if f.tenant == "" {
		return
	}
	t.Run("TenantHTTP", func(t *testing.T) {
		t.Parallel()
		var faults []*armedLookup
		for _, fault := range lookupFaults()[:2] { // fails, panics
			faults = append(faults, newArmedLookup(t, fault))
		}
		fx := f.open(t, storeOpts{lookup: func(ctx context.Context, tenant string, open func() (inbox.Tenant, error)) (inbox.Tenant, error) {
			for _, fault := range faults {
				if fault.armed.Load() {
					return fault.lookup(ctx, tenant, open)
				}
			}
			return open()
		}})
		ts := fx.store.(*inbox.TenantStore)
		ledgers := tenantLedgers(t, fx)
		ib := newTestInbox(t, fx.store, inbox.Config{})
		directoryDown := errors.New("tenant directory unreachable")
		m, err := inboxhttp.New(inboxhttp.Config{
			Inbox: ib, Consumer: "POST /payments",
			Tenant: func(r *http.Request) (string, error) {
				if r.Header.Get("X-Directory-Down") != "" {
					return "", directoryDown
				}
				return inboxhttp.TenantFromHeader("X-Tenant-ID")(r)
			},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		require.NoError(t, err)
		calls := 0
		h := m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			tenant, _ := inbox.TenantFromContext(r.Context())
			id, err := outbox.MessageIDFromContext(r.Context(), "PaymentTaken")
			if err == nil {
				err = creditTenant(r.Context(), ledgers, 1)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, "%s %s", tenant, id)
		}))
		send := func(tenant, key string, header ...string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":1}`))
			req.Header.Set("Idempotency-Key", `"`+key+`"`)
			if tenant != "" {
				req.Header.Set("X-Tenant-ID", tenant)
			}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w
		}
		requireStatus := func(w *httptest.ResponseRecorder, status int, retryAfter string, what string) {
			t.Helper()
			require.Equal(t, status, w.Code, "%s: %s", what, w.Body.String())
			require.Equal(t, retryAfter, w.Header().Get("Retry-After"), what)
		}

		// The same key in two tenants: two requests, two answers, two outbox ids.
		a, b := send(caseTenant, "k1"), send(otherTenant, "k1")
		requireStatus(a, http.StatusCreated, "", "the case tenant's first request")
		requireStatus(b, http.StatusCreated, "", "the other tenant's, with the same key")
		require.NotEqual(t, strings.Fields(a.Body.String())[1], strings.Fields(b.Body.String())[1], "each tenant's outbox id")
		again := send(caseTenant, "k1")
		requireStatus(again, http.StatusCreated, "", "a retry")
		require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
		require.Equal(t, a.Body.String(), again.Body.String(), "the tenant's own stored answer")

		// No tenant: 400; an unknown one: 404; neither to be retried.
		requireStatus(send("", "k2"), http.StatusBadRequest, "", "no tenant")
		requireStatus(send("tenant-x", "k2"), http.StatusNotFound, "", "an unknown tenant")
		// Issue 32, defect 2: the tenant function failing (the directory down) is
		// transient, as the Watermill middleware has it: 503, retry after 1 s.
		requireStatus(send(caseTenant, "k2", "X-Directory-Down", "1"), http.StatusServiceUnavailable, "1", "the tenant function failed")
		// A Lookup that fails, then one that panics: 503, and the retry goes through.
		for _, fault := range faults {
			require.NoError(t, ts.Remove(t.Context(), caseTenant))
			fault.armed.Store(true)
			requireStatus(send(caseTenant, "k2"), http.StatusServiceUnavailable, "1", "Lookup "+fault.fault.name)
			fault.armed.Store(false)
		}
		require.Equal(t, 2, calls, "nothing ran but the two first requests")
		requireStatus(send(caseTenant, "k2"), http.StatusCreated, "", "the retry, once the tenant opens")
		for tenant, want := range map[string]int{caseTenant: 2, otherTenant: 1} {
			total, _ := ledgers[tenant].balance(t)
			require.Equal(t, want, total, tenant)
		}
	})
}
