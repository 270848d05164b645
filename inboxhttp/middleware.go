package inboxhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/watermill-inbox/inbox"
)

// Idempotency is the middleware built from one Config: one route's (one consumer's)
// keys. Use its Middleware method.
type Idempotency struct {
	cfg     Config
	methods map[string]bool
	omitted map[string]bool

	mu       sync.Mutex
	inFlight map[inFlightKey]struct{} // keys being processed here, for Conflict
}

// inFlightKey is a key being processed here, in its tenant ("" without one).
type inFlightKey struct{ tenant, key string }

// New returns an Idempotency middleware. It fails when the config is invalid, naming the
// field and what to do.
func New(cfg Config) (*Idempotency, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("inboxhttp: invalid config: %w", err)
	}
	m := &Idempotency{cfg: cfg, methods: map[string]bool{}, omitted: map[string]bool{}, inFlight: map[inFlightKey]struct{}{}}
	for _, method := range cfg.Methods {
		m.methods[method] = true
	}
	for _, name := range cfg.OmitHeaders {
		m.omitted[http.CanonicalHeaderKey(name)] = true
	}
	return m, nil
}

// Errors that end a request without a stored response; never seen by callers.
var (
	errNotStored = errors.New("inboxhttp: the response status is not stored")
	// errWaitExpired is contention (the inbox observes it so): the key was held too long.
	errWaitExpired = fmt.Errorf("inboxhttp: the wait for the key ran out (Config.InFlightWait): %w", inbox.ErrContended)
	// errPanicked is a clean failure: net/http recovers the panic, which the middleware
	// raises again once the transaction rolled back, so the process lives on.
	errPanicked = errors.New("inboxhttp: the handler panicked; rolled back")
)

// Middleware deduplicates next's requests: mux.Handle("POST /payments", m.Middleware(h)),
// or r.Use(m.Middleware) with chi. See the package doc for what each request gets.
//
// The handler runs with a context that carries the inbox transaction and is not
// cancelled when the client goes away: a request that started is finished and stored,
// so that the client's retry gets its answer. Put a signature check (webhooks) and
// authentication outside this middleware, so that only requests they accept claim keys.
func (m *Idempotency) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.methods[r.Method] {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.cfg.MaxRequestBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				problem(w, http.StatusRequestEntityTooLarge, "about:blank", fmt.Sprintf("The request body is larger than %d bytes, the most this route stores.", m.cfg.MaxRequestBody))
				return
			}
			problem(w, http.StatusBadRequest, "about:blank", "The request body could not be read: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))

		key, err := m.cfg.Key(r, body)
		if err == nil && key == "" {
			err = fmt.Errorf("%w: the key function returned an empty key", inbox.ErrNoKey)
		}
		switch {
		case errors.Is(err, inbox.ErrNoKey) && m.cfg.Optional:
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
			return
		case errors.Is(err, inbox.ErrNoKey):
			problem(w, http.StatusBadRequest, "about:blank", "This request needs an idempotency key: "+clientText(err)+".")
			return
		case err != nil:
			problem(w, http.StatusBadRequest, "about:blank", "The idempotency key is malformed: "+clientText(err)+".")
			return
		}
		if m.cfg.Scope != nil {
			scope, err := m.cfg.Scope(r)
			if err == nil && scope == "" {
				err = errors.New("the Scope function returned an empty scope")
			}
			if err != nil { // the server's to fix: authentication must run before this middleware
				m.cfg.Logger.Error("inboxhttp: no client scope for the idempotency key, nothing run", "consumer", m.cfg.Consumer, "path", r.URL.Path, "error", err)
				problem(w, http.StatusInternalServerError, ProblemPermanent, "The request's client could not be identified, so its idempotency key cannot be kept apart from other clients'; nothing was run.")
				return
			}
			key = ScopedKey(scope, key)
		}

		if m.cfg.Tenant != nil {
			tenant, err := m.cfg.Tenant(r)
			if err == nil && tenant == "" {
				err = fmt.Errorf("%w: Config.Tenant returned an empty tenant", inbox.ErrNoTenant)
			}
			if err != nil {
				m.tenantFailed(w, r, key, err)
				return
			}
			r = r.WithContext(inbox.ContextWithTenant(r.Context(), tenant))
		}
		if m.cfg.InFlight == Conflict {
			inFlight := inFlightKey{key: key} // per tenant, as the stored keys are
			inFlight.tenant, _ = inbox.TenantFromContext(r.Context())
			if !m.enter(inFlight) {
				w.Header().Set("Retry-After", "1")
				problem(w, http.StatusConflict, "about:blank", "A request with this idempotency key is still being processed; retry later.")
				return
			}
			defer m.leave(inFlight)
		}
		m.serve(w, r, next, key, body)
	})
}

// serve processes a request with a key: the handler in the inbox transaction, or the
// stored response.
//
// The transaction is always the middleware's own, never one the request context
// carries (inbox.ContextWithTx(ctx, nil) hides it): the middleware must commit the
// response with the key before it sends it, and roll back what it does not store.
func (m *Idempotency) serve(w http.ResponseWriter, r *http.Request, next http.Handler, key string, body []byte) {
	// The request's context, detached from the client (see Middleware), and cancelled
	// only if the claim is still waiting on the key when InFlightWait runs out, with a
	// cause that makes the inbox see contention.
	ctx := inbox.ContextWithTx(context.WithoutCancel(r.Context()), nil)
	if m.cfg.ReplayHint != nil && m.cfg.ReplayHint(r) {
		ctx = inbox.ContextWithReplayHint(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(m.cfg.InFlightWait, func() { cancel(errWaitExpired) })
	defer timer.Stop()

	var resp *response
	var panicked any
	res, err := m.cfg.Inbox.ProcessResult(ctx, m.cfg.Consumer, key, m.cfg.Fingerprint(r, body), func(txCtx context.Context) ([]byte, error) {
		if !timer.Stop() { // the wait ran out as the claim came through
			return nil, errWaitExpired
		}
		resp = newResponse(m.cfg.MaxResponseBody, m.omitted)
		req := r.WithContext(txCtx)
		req.Body = io.NopCloser(bytes.NewReader(body))
		if panicked = serveRecovering(next, resp, req); panicked != nil {
			return nil, errPanicked
		}
		resp.finish()
		switch {
		case resp.tooBig:
			return nil, ErrResponseTooLarge
		case !m.cfg.StoreStatus(resp.status):
			return nil, errNotStored
		}
		return resp.encode(), nil
	})
	if panicked != nil { // rolled back: net/http does with it what it does with a panic
		panic(panicked)
	}

	switch {
	case err == nil && !res.Duplicate:
		m.send(w, r, resp.status, resp.out(), resp.body.Bytes(), "")
	case err == nil && res.Mismatch, errors.Is(err, inbox.ErrFingerprintMismatch):
		problem(w, http.StatusUnprocessableEntity, "about:blank", "This idempotency key was used for a different request (method, path or body).")
	case err == nil:
		s, err := decode(res.Output)
		if err != nil { // a retry cannot help: the key holds something else
			m.cfg.Logger.Error("inboxhttp: the key's stored output is not a response", "consumer", m.cfg.Consumer, "key", key, "path", r.URL.Path, "error", err)
			problem(w, http.StatusInternalServerError, ProblemPermanent, "This idempotency key was processed, but no response of this route is stored with it.")
			return
		}
		m.send(w, r, s.status, s.header, s.body, m.cfg.ReplayHeader)
	case errors.Is(err, errNotStored):
		m.send(w, r, resp.status, resp.out(), resp.body.Bytes(), "")
	case errors.Is(err, ErrResponseTooLarge):
		m.cfg.Logger.Error("inboxhttp: response too large to store, rolled back", "consumer", m.cfg.Consumer, "path", r.URL.Path, "max", m.cfg.MaxResponseBody)
		problem(w, http.StatusInternalServerError, ProblemPermanent, fmt.Sprintf("The response is larger than %d bytes, the most this route stores; nothing was stored.", m.cfg.MaxResponseBody))
	case errors.Is(err, inbox.ErrUnknownTenant): // permanent: nothing written, nothing to retry
		problem(w, http.StatusNotFound, ProblemPermanent, "This request's tenant is unknown; nothing was processed.")
	case errors.Is(err, inbox.ErrNoTenant): // the route is not set up for a store that routes by tenant
		m.cfg.Logger.Error("inboxhttp: the store routes by tenant but the request context has none: set Config.Tenant", "consumer", m.cfg.Consumer, "path", r.URL.Path, "error", err)
		problem(w, http.StatusInternalServerError, ProblemPermanent, "This route does not know the request's tenant; nothing was processed.")
	case resp == nil && (errors.Is(err, inbox.ErrContended) || ctx.Err() != nil):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "about:blank", "A request with this idempotency key is still being processed; retry later.")
	default:
		m.fail(w, r, key, err)
	}
}

// tenantFailed answers a request whose tenant Config.Tenant could not derive, as the
// error table says: the request names none (ErrNoTenant), 400; the tenant is unknown
// (ErrUnknownTenant), 404; the function failed otherwise (the tenant directory is
// down), as any failure: 503 with Retry-After when a retry can help, 500 when the error
// is permanent (inbox.Permanent). Nothing ran.
func (m *Idempotency) tenantFailed(w http.ResponseWriter, r *http.Request, key string, err error) {
	switch {
	case errors.Is(err, inbox.ErrNoTenant):
		problem(w, http.StatusBadRequest, "about:blank", "The request's tenant could not be found ("+clientText(err)+").")
	case errors.Is(err, inbox.ErrUnknownTenant):
		problem(w, http.StatusNotFound, ProblemPermanent, "This request's tenant is unknown; nothing was processed.")
	default:
		m.fail(w, r, key, fmt.Errorf("inboxhttp: deriving the request's tenant (Config.Tenant): %w", err))
	}
}

// serveRecovering serves r with h and returns what h panicked with, nil if it did not.
func serveRecovering(h http.Handler, w http.ResponseWriter, r *http.Request) (panicked any) {
	defer func() { panicked = recover() }()
	h.ServeHTTP(w, r)
	return nil
}

// send writes a response and logs a failure to, since nothing else can be done.
func (m *Idempotency) send(w http.ResponseWriter, r *http.Request, status int, header http.Header, body []byte, replayHeader string) {
	if err := write(w, status, header, body, replayHeader); err != nil {
		m.cfg.Logger.Debug("inboxhttp: the client did not take the response", "consumer", m.cfg.Consumer, "path", r.URL.Path, "error", err)
	}
}

// fail answers a failure of the inbox, the store or the commit: nothing was stored. A
// transient one (a retry can succeed, and runs the handler again) gets 503 with
// Retry-After; a permanent one (inbox.Permanent: the same request fails the same way)
// gets 500 without, and a problem type that says so (see failureOf).
func (m *Idempotency) fail(w http.ResponseWriter, r *http.Request, key string, err error) {
	m.cfg.Logger.Error("inboxhttp: request failed, nothing stored", "consumer", m.cfg.Consumer, "key", key, "path", r.URL.Path, "error", err)
	f := failureOf(err)
	if f.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	problem(w, f.status, f.typ, f.detail)
}

// failure is what a request that failed gets: docs/errors.md's table.
type failure struct {
	status     int
	typ        string
	detail     string
	retryAfter bool
}

// failures are the failures answered with a detail of their own; the others follow
// inbox.Permanent.
var failures = []struct {
	err error
	failure
}{
	{inbox.ErrTooManyAttempts, failure{http.StatusInternalServerError, ProblemTooManyAttempts,
		"Earlier requests with this idempotency key never finished: the server died while it handled them. This one was refused without running, and will be again: do not send it again.", false}},
	{inbox.ErrOutputTooLarge, failure{http.StatusInternalServerError, ProblemPermanent,
		"The response is larger than the inbox stores with a key (inbox.Config.MaxOutputBytes); nothing was stored, and the same request gets the same answer.", false}},
}

// failureOf maps an error of ProcessResult to what the request gets.
func failureOf(err error) failure {
	for _, f := range failures {
		if errors.Is(err, f.err) {
			return f.failure
		}
	}
	if inbox.Permanent(err) {
		return failure{http.StatusInternalServerError, ProblemPermanent,
			"The request failed, nothing was stored, and it cannot succeed as it is: do not send it again with this idempotency key.", false}
	}
	return failure{http.StatusServiceUnavailable, ProblemTransient,
		"The request could not be completed and nothing was stored; retry it with the same idempotency key.", true}
}

func (m *Idempotency) enter(key inFlightKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.inFlight[key]; ok {
		return false
	}
	m.inFlight[key] = struct{}{}
	return true
}

func (m *Idempotency) leave(key inFlightKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inFlight, key)
}

// Problem types of the failures the middleware answers itself beyond HTTP's own
// statuses (docs/errors.md): a client retries a transient one (503, with Retry-After)
// with the same key, and must not retry a permanent one.
const (
	ProblemTransient       = "https://github.com/watermill-inbox/inbox/blob/main/docs/errors.md#transient"
	ProblemPermanent       = "https://github.com/watermill-inbox/inbox/blob/main/docs/errors.md#permanent"
	ProblemTooManyAttempts = "https://github.com/watermill-inbox/inbox/blob/main/docs/errors.md#errtoomanyattempts"
)

// Problem is an RFC 9457 problem details object, the body of every error the middleware
// answers itself (Content-Type application/problem+json).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// problem answers an RFC 9457 problem: typ is "about:blank" where the status says it
// all, or one of the Problem types.
func problem(w http.ResponseWriter, status int, typ, detail string) {
	body, _ := json.Marshal(Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
