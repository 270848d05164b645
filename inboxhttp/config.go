package inboxhttp

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/oneline"
)

// InFlightMode says what a request gets while another request with its key is still
// being processed (its transaction holds the key).
type InFlightMode int

const (
	// Wait makes the request wait for the first one to end, at most Config.InFlightWait:
	// it then gets the first request's stored response (or runs the handler, if the
	// first one failed and stored nothing). A wait that runs out gets 409 Conflict. The
	// wait is on the database's lock of the key, so it works across server processes.
	// It is the default: a client that retries because its first attempt timed out gets
	// the answer instead of an error it must retry again.
	Wait InFlightMode = iota
	// Conflict answers 409 Conflict at once, as the idempotency-key draft does, when the
	// first request runs in this same middleware (process). When it runs in another
	// process, only the database knows: the request then waits as with Wait, and a
	// short store LockTimeout (PostgresConfig.LockTimeout) makes that 409 come sooner.
	Conflict
)

func (m InFlightMode) String() string {
	switch m {
	case Wait:
		return "Wait"
	case Conflict:
		return "Conflict"
	}
	return fmt.Sprintf("InFlightMode(%d)", int(m))
}

// FingerprintFunc identifies a request's content, so that the same key on a different
// request is told apart (422). body is the whole request body.
type FingerprintFunc func(r *http.Request, body []byte) []byte

// RequestFingerprint is the SHA-256 of the method, the path with its query, and the body.
// It is the default fingerprint.
func RequestFingerprint(r *http.Request, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{'?'})
	h.Write([]byte(r.URL.RawQuery))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// StoreResponse reports whether a response with this status is a result, stored and
// replayed to retries, or a failure, rolled back with the handler's writes so that a
// retry runs the handler again. It is the default of Config.StoreStatus: every status
// below 500 is a result (a 4xx validation error is the answer to that request), except
// 408, 425 and 429, which ask the client to try again later; a 5xx is a failure.
func StoreResponse(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status < 500
}

// Config configures an Idempotency middleware. Pass it to New, which applies the
// defaults and validates it.
type Config struct {
	// Inbox stores the keys and responses; its Config.Store is the database the
	// handlers write to. Required.
	Inbox *inbox.Inbox

	// Consumer names the keys' scope: one per route, e.g. "POST /payments" or
	// "stripe-webhooks". The same key on two consumers is two keys. Required; at most
	// 255 bytes of UTF-8 without NUL bytes (inbox.ValidateConsumer).
	Consumer string

	// Key derives a request's key. Keys are per Consumer and, with Scope, per client.
	// Defaults to IdempotencyKey.
	Key KeyFunc

	// Scope names the client a request comes from, e.g. the authenticated user or
	// account that an authentication middleware outside this one put in the request's
	// context, so that two clients sending the same key are two keys (as Stripe scopes
	// keys by account). The key is stored as ScopedKey(scope, key). A request whose
	// scope cannot be found (an error, or an empty scope) gets 500 and runs nothing:
	// without a scope, one client could get another's stored response. Defaults to nil:
	// keys are per Consumer only, and clients sharing a route share its keys.
	Scope func(r *http.Request) (string, error)

	// Tenant derives a request's tenant, e.g. TenantFromHeader("X-Tenant-ID") or from
	// the host or the authenticated principal: the middleware puts it in the request
	// context (inbox.ContextWithTenant), so that an inbox on an inbox.TenantStore keeps
	// the key and runs the handler in that tenant's database, and the handler finds it
	// with inbox.TenantFromContext. A request without one (an error wrapping
	// inbox.ErrNoTenant, or an empty tenant) gets 400 Bad Request; one whose tenant is
	// unknown (the function's error, or the TenantStore's Lookup, wraps
	// inbox.ErrUnknownTenant) gets 404 Not Found; any other error of the function (the
	// tenant directory is down) is a failure like the store's: 503 with Retry-After, or
	// 500 when inbox.Permanent says a retry cannot help. Nothing runs or is written in
	// any of these cases. Keys are per tenant: the same key in two tenants is two keys.
	// Defaults to nil: a tenant an outer middleware put in the request context passes
	// through.
	Tenant func(r *http.Request) (string, error)

	// Optional lets a request without a key through to the handler, without
	// deduplication (no transaction, nothing stored). A malformed key is refused either
	// way. Defaults to false: a request without a key gets 400 Bad Request.
	Optional bool

	// Methods are the request methods the middleware deduplicates; others pass through
	// untouched. Defaults to POST and PATCH.
	Methods []string

	// Fingerprint identifies a request's content, stored with the key: a retry whose
	// fingerprint differs gets 422 Unprocessable Content. Defaults to RequestFingerprint.
	Fingerprint FingerprintFunc

	// StoreStatus reports whether a response status is stored (a result) or rolled back
	// (a failure). A response that is not stored is still sent, unmarked. Defaults to
	// StoreResponse.
	StoreStatus func(status int) bool

	// InFlight says what a request gets while another request with its key is still
	// being processed. Defaults to Wait.
	InFlight InFlightMode

	// InFlightWait bounds how long a request waits for the key (Wait, and Conflict across
	// processes) before it gets 409 Conflict. The store's own LockTimeout, when shorter,
	// ends the wait first. Defaults to 10 s.
	InFlightWait time.Duration

	// MaxRequestBody caps the request body, which is read whole (for the fingerprint
	// and key) before the handler runs; a longer body gets 413 Content Too Large.
	// Defaults to 1 MiB.
	MaxRequestBody int64

	// MaxResponseBody caps the response body the handler writes, which is buffered
	// and stored; beyond it Write returns ErrResponseTooLarge, and the client gets 500
	// with everything rolled back. Defaults to 1 MiB.
	MaxResponseBody int64

	// OmitHeaders are response headers neither stored nor replayed. Hop-by-hop headers
	// and Content-Length are never stored. Defaults to Date.
	OmitHeaders []string

	// ReplayHint reports whether a request is likely a retry, e.g. from a header the
	// client sets on its retries (AWS SDKs send "amz-sdk-request: attempt=2"; your own
	// clients may send a retry count). Such a request's stored response is read before
	// its key is claimed (inbox.ContextWithReplayHint): the replay of a response another
	// server process stored is answered in one round trip instead of a refused claim and
	// a read, and a hinted request that turns out to be new pays that read, one round trip
	// more. A wrong hint only costs that round trip: the database answers, never the
	// hint. Defaults to nil: only the keys this process stored are read first
	// (inbox.Config.RecentKeys).
	ReplayHint func(r *http.Request) bool

	// ReplayHeader is the header set to "true" on a replayed response. Defaults to
	// "Idempotent-Replayed", Stripe's name.
	ReplayHeader string

	// Logger logs the causes of 5xx answers (store and commit failures). Defaults to
	// slog.Default().
	Logger *slog.Logger
}

const (
	defaultInFlightWait = 10 * time.Second
	defaultMaxBody      = 1 << 20
)

func (c *Config) setDefaults() {
	if c.Key == nil {
		c.Key = IdempotencyKey
	}
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.Fingerprint == nil {
		c.Fingerprint = RequestFingerprint
	}
	if c.StoreStatus == nil {
		c.StoreStatus = StoreResponse
	}
	if c.InFlightWait == 0 {
		c.InFlightWait = defaultInFlightWait
	}
	if c.MaxRequestBody == 0 {
		c.MaxRequestBody = defaultMaxBody
	}
	if c.MaxResponseBody == 0 {
		c.MaxResponseBody = defaultMaxBody
	}
	if c.OmitHeaders == nil {
		c.OmitHeaders = []string{"Date"}
	}
	if c.ReplayHeader == "" {
		c.ReplayHeader = "Idempotent-Replayed"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Inbox == nil {
		errs = append(errs, errors.New("Inbox is nil: set it to the *inbox.Inbox from inbox.New"))
	}
	if c.Consumer == "" {
		errs = append(errs, errors.New(`Consumer is empty: name the route's keys, e.g. "POST /payments"`))
	} else if err := inbox.ValidateConsumer(c.Consumer); err != nil { // the inbox's own rule
		errs = append(errs, fmt.Errorf("Consumer: %w", err))
	}
	if c.InFlight < Wait || c.InFlight > Conflict {
		errs = append(errs, fmt.Errorf("InFlight is %v: use inboxhttp.Wait or inboxhttp.Conflict", c.InFlight))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"InFlightWait", int64(c.InFlightWait)}, {"MaxRequestBody", c.MaxRequestBody}, {"MaxResponseBody", c.MaxResponseBody}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s is negative: use 0 for the default, or a positive value", f.name))
		}
	}
	if len(c.Methods) == 0 {
		errs = append(errs, errors.New("Methods is empty: leave it nil for POST and PATCH, or list the methods to deduplicate"))
	}
	return oneline.Join(errs...)
}
