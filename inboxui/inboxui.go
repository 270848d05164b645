package inboxui

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/watermill-inbox/inbox"
)

// Config configures a Handler.
type Config struct {
	// Store is the store the page shows and acts on: any inbox.Store, a TenantStore
	// included. Required.
	Store inbox.Store

	// Authorize decides who may see the page and act on it. It is called on every
	// request, before anything is read from the store, and returns the operator's
	// name, which the action log records, or an error that refuses the request:
	// ErrNoCredentials (wrapped or not) with 401 Unauthorized and a Basic challenge,
	// any other with 403 Forbidden. BasicAuth returns one. Required: there is no
	// default that lets anyone in.
	Authorize func(r *http.Request) (operator string, err error)

	// Path is where the handler is mounted, starting and ending with "/": the handler
	// serves the paths under it and its links point there. Mount it without
	// http.StripPrefix: mux.Handle(cfg.Path, ui). Defaults to "/".
	Path string

	// TrustedOrigins are origins ("https://ops.example.com") whose cross-origin POSTs
	// are accepted: a page on another host that posts to this one on purpose. Defaults
	// to none: only same-origin requests may act.
	TrustedOrigins []string

	// Logger receives a line for every action (with the operator, the tenant and what
	// changed) and every refused request. Defaults to slog.Default().
	Logger *slog.Logger

	// AttemptLimit is how many attempts the attempts page lists for a consumer, the
	// oldest first. Defaults to 100.
	AttemptLimit int

	// Timeout bounds the store calls of one request. Defaults to 15 seconds.
	Timeout time.Duration
}

// ErrNoCredentials is what Config.Authorize returns (wrapped or not) for a request
// without valid credentials, to have it answered with 401 Unauthorized and a Basic
// challenge, so that a browser asks for a user name and a password. Permanent: the same
// request is refused again.
var ErrNoCredentials = errors.New("inboxui: no valid credentials")

// Handler is the operator's page, an http.Handler. Build it with New.
type Handler struct {
	cfg      Config
	mux      *http.ServeMux
	cop      *http.CrossOriginProtection
	tmpl     *template.Template
	sections []section
	csp      string
}

var _ http.Handler = (*Handler)(nil)

// New returns the page's handler. It applies the defaults and checks cfg: the store and
// the authorization func are required, the path must start and end with "/", and the
// trusted origins must be origins.
func New(cfg Config) (*Handler, error) {
	if cfg.Path == "" {
		cfg.Path = "/"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AttemptLimit == 0 {
		cfg.AttemptLimit = 100
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 15 * time.Second
	}
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("Store is nil: set the inbox store the page shows"))
	}
	if cfg.Authorize == nil {
		errs = append(errs, errors.New("Authorize is nil: set a func that returns the operator's name for a request it lets in (inboxui.BasicAuth is one); the page lets no one in without it"))
	}
	if !strings.HasPrefix(cfg.Path, "/") || !strings.HasSuffix(cfg.Path, "/") || strings.ContainsAny(cfg.Path, "{}?#") {
		errs = append(errs, fmt.Errorf("Path is %q: use the path the handler is mounted at, starting and ending with \"/\" (\"/ops/inbox/\")", cfg.Path))
	}
	if cfg.AttemptLimit < 0 {
		errs = append(errs, fmt.Errorf("AttemptLimit is %d: use a positive number, or 0 for the default 100", cfg.AttemptLimit))
	}
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout is %v: use a positive duration, or 0 for the default 15s", cfg.Timeout))
	}
	cop := http.NewCrossOriginProtection()
	for _, origin := range cfg.TrustedOrigins {
		if err := cop.AddTrustedOrigin(origin); err != nil {
			errs = append(errs, fmt.Errorf("TrustedOrigins: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("inboxui: invalid config: %w", err)
	}
	tmpl, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), cop: cop, tmpl: tmpl, csp: contentSecurityPolicy()}
	cop.SetDenyHandler(http.HandlerFunc(h.refuseCrossOrigin))
	h.routes()
	return h, nil
}

// routes registers the pages (GET) and the actions (POST). A new part of the page is a
// section (sections.go); a new action is a POST route registered with h.action.
func (h *Handler) routes() {
	h.sections = []section{tenantsSection(), consumersSection(), offsetsSection()}
	p := h.cfg.Path
	h.mux.HandleFunc("GET "+p+"{$}", h.overview)
	h.mux.HandleFunc("GET "+p+"attempts", h.attemptsPage)
	h.mux.HandleFunc("GET "+p+"offsets/reset", h.resetPage)
	h.action("POST "+p+"offsets/reset", h.resetOffset)
}

// ServeHTTP implements http.Handler: every request is checked for its origin (a POST
// from another origin is refused) and authorized before it reaches a page or an
// action.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", h.csp)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cache-Control", "no-store")
	h.cop.Handler(http.HandlerFunc(h.authorized)).ServeHTTP(w, r)
}

// operatorKey is the context key of the operator's name.
type operatorKey struct{}

func (h *Handler) authorized(w http.ResponseWriter, r *http.Request) {
	operator, err := h.cfg.Authorize(r)
	if err != nil {
		h.refused(r, "not authorized", err)
		if errors.Is(err, ErrNoCredentials) {
			w.Header().Set("WWW-Authenticate", `Basic realm="inbox", charset="UTF-8"`)
			http.Error(w, "401 unauthorized", http.StatusUnauthorized)
			return
		}
		http.Error(w, "403 forbidden", http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), operatorKey{}, operator), h.cfg.Timeout)
	defer cancel()
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

func (h *Handler) refuseCrossOrigin(w http.ResponseWriter, r *http.Request) {
	h.refused(r, "cross-origin request", nil)
	http.Error(w, "403 forbidden: cross-origin request", http.StatusForbidden)
}

// refused logs a request turned away.
func (h *Handler) refused(r *http.Request, why string, err error) {
	attrs := []any{"why", why, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	h.cfg.Logger.Warn("inboxui: request refused", attrs...)
}

// action registers a POST route. ServeHTTP has checked its origin and authorized it,
// as every route; the action logs what it did, and its failure, with the operator.
func (h *Handler) action(pattern string, do func(w http.ResponseWriter, r *http.Request) (did []any, err error)) {
	name := strings.TrimPrefix(strings.TrimPrefix(pattern, "POST "), h.cfg.Path)
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		did, err := do(w, r)
		attrs := append([]any{"action", name, "operator", operatorOf(r.Context()), "remote", r.RemoteAddr}, did...)
		if err != nil {
			h.cfg.Logger.Error("inboxui: action failed", append(attrs, "error", err.Error())...)
			return
		}
		h.cfg.Logger.Info("inboxui: action", attrs...)
	})
}

func operatorOf(ctx context.Context) string {
	op, _ := ctx.Value(operatorKey{}).(string)
	return op
}
