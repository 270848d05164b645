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
	"strings"
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
	inFlight map[string]struct{} // keys being processed here, for Conflict
}

// New returns an Idempotency middleware. It fails when the config is invalid, naming the
// field and what to do.
func New(cfg Config) (*Idempotency, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("inboxhttp: invalid config: %w", err)
	}
	m := &Idempotency{cfg: cfg, methods: map[string]bool{}, omitted: map[string]bool{}, inFlight: map[string]struct{}{}}
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
	errNotStored   = errors.New("inboxhttp: the response status is not stored")
	errWaitExpired = errors.New("inboxhttp: the wait for the key ran out")
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
				problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("The request body is larger than %d bytes, the most this route stores.", m.cfg.MaxRequestBody))
				return
			}
			problem(w, http.StatusBadRequest, "The request body could not be read: "+err.Error())
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
			problem(w, http.StatusBadRequest, "This request needs an idempotency key: "+err.Error()+".")
			return
		case err != nil:
			problem(w, http.StatusBadRequest, "The idempotency key is malformed: "+err.Error()+".")
			return
		}

		if m.cfg.Tenant != nil {
			tenant, err := m.cfg.Tenant(r)
			if err == nil && tenant == "" {
				err = fmt.Errorf("%w: Config.Tenant returned an empty tenant", inbox.ErrNoTenant)
			}
			if err != nil {
				problem(w, http.StatusBadRequest, "The request's tenant could not be found ("+strings.TrimPrefix(err.Error(), "inbox: ")+").")
				return
			}
			r = r.WithContext(inbox.ContextWithTenant(r.Context(), tenant))
		}
		if m.cfg.InFlight == Conflict {
			inFlight := key // per tenant, as the stored keys are
			if tenant, ok := inbox.TenantFromContext(r.Context()); ok {
				inFlight = tenant + "\x00" + key
			}
			if !m.enter(inFlight) {
				w.Header().Set("Retry-After", "1")
				problem(w, http.StatusConflict, "A request with this idempotency key is still being processed; retry later.")
				return
			}
			defer m.leave(inFlight)
		}
		m.serve(w, r, next, key, body)
	})
}

// serve processes a request with a key: the handler in the inbox transaction, or the
// stored response.
func (m *Idempotency) serve(w http.ResponseWriter, r *http.Request, next http.Handler, key string, body []byte) {
	// The request's context, detached from the client (see Middleware), and cancelled
	// only if the claim is still waiting on the key when InFlightWait runs out.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	timer := time.AfterFunc(m.cfg.InFlightWait, cancel)
	defer timer.Stop()

	var resp *response
	res, err := m.cfg.Inbox.ProcessResult(ctx, m.cfg.Consumer, key, m.cfg.Fingerprint(r, body), func(txCtx context.Context) ([]byte, error) {
		if !timer.Stop() { // the wait ran out as the claim came through
			return nil, errWaitExpired
		}
		resp = newResponse(m.cfg.MaxResponseBody, m.omitted)
		req := r.WithContext(txCtx)
		req.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(resp, req)
		resp.finish()
		switch {
		case resp.tooBig:
			return nil, ErrResponseTooLarge
		case !m.cfg.StoreStatus(resp.status):
			return nil, errNotStored
		}
		return resp.encode(), nil
	})

	switch {
	case err == nil && !res.Duplicate:
		m.send(w, r, resp.status, resp.sent, resp.body.Bytes(), "")
	case err == nil && res.Mismatch, errors.Is(err, inbox.ErrFingerprintMismatch):
		problem(w, http.StatusUnprocessableEntity, "This idempotency key was used for a different request (method, path or body).")
	case err == nil:
		s, err := decode(res.Output)
		if err != nil { // a retry cannot help: the key holds something else
			m.cfg.Logger.Error("inboxhttp: the key's stored output is not a response", "consumer", m.cfg.Consumer, "key", key, "path", r.URL.Path, "error", err)
			problem(w, http.StatusInternalServerError, "This idempotency key was processed, but no response of this route is stored with it.")
			return
		}
		m.send(w, r, s.status, s.header, s.body, m.cfg.ReplayHeader)
	case errors.Is(err, errNotStored):
		m.send(w, r, resp.status, resp.sent, resp.body.Bytes(), "")
	case errors.Is(err, ErrResponseTooLarge):
		m.cfg.Logger.Error("inboxhttp: response too large to store, rolled back", "consumer", m.cfg.Consumer, "path", r.URL.Path, "max", m.cfg.MaxResponseBody)
		problem(w, http.StatusInternalServerError, fmt.Sprintf("The response is larger than %d bytes, the most this route stores; nothing was stored.", m.cfg.MaxResponseBody))
	case errors.Is(err, inbox.ErrUnknownTenant): // permanent: nothing written, nothing to retry
		problem(w, http.StatusNotFound, "This request's tenant is unknown; nothing was processed.")
	case errors.Is(err, inbox.ErrNoTenant): // the route is not set up for a store that routes by tenant
		m.cfg.Logger.Error("inboxhttp: the store routes by tenant but the request context has none: set Config.Tenant", "consumer", m.cfg.Consumer, "path", r.URL.Path, "error", err)
		problem(w, http.StatusInternalServerError, "This route does not know the request's tenant; nothing was processed.")
	case resp == nil && (errors.Is(err, inbox.ErrContended) || errors.Is(err, errWaitExpired) || ctx.Err() != nil):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "A request with this idempotency key is still being processed; retry later.")
	default:
		m.fail(w, r, key, err)
	}
}

// send writes a response and logs a failure to, since nothing else can be done.
func (m *Idempotency) send(w http.ResponseWriter, r *http.Request, status int, header http.Header, body []byte, replayHeader string) {
	if err := write(w, status, header, body, replayHeader); err != nil {
		m.cfg.Logger.Debug("inboxhttp: the client did not take the response", "consumer", m.cfg.Consumer, "path", r.URL.Path, "error", err)
	}
}

// fail answers a failure of the store or the commit: nothing was stored, so a retry runs
// the handler again.
func (m *Idempotency) fail(w http.ResponseWriter, r *http.Request, key string, err error) {
	m.cfg.Logger.Error("inboxhttp: request failed, nothing stored", "consumer", m.cfg.Consumer, "key", key, "path", r.URL.Path, "error", err)
	w.Header().Set("Retry-After", "1")
	problem(w, http.StatusServiceUnavailable, "The request could not be completed and nothing was stored; retry it with the same idempotency key.")
}

func (m *Idempotency) enter(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.inFlight[key]; ok {
		return false
	}
	m.inFlight[key] = struct{}{}
	return true
}

func (m *Idempotency) leave(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inFlight, key)
}

// Problem is an RFC 9457 problem details object, the body of every error the middleware
// answers itself (Content-Type application/problem+json).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func problem(w http.ResponseWriter, status int, detail string) {
	body, _ := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
