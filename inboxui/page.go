package inboxui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/watermill-inbox/inbox"
)

// The page's frame: the templates (templates/*.html, one per section and per page, and
// layout.html around them), the CSS inline in the layout, and the headers that go with
// them.

//go:embed templates/*.html templates/style.css
var files embed.FS

// style is the page's CSS, inlined in a <style> element whose hash the
// Content-Security-Policy names.
var style = mustRead("templates/style.css")

func mustRead(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// contentSecurityPolicy allows the page's own CSS and forms, and nothing else: no
// script, no image, no frame, no other origin.
func contentSecurityPolicy() string {
	sum := sha256.Sum256([]byte(style))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}

func parseTemplates() (*template.Template, error) {
	tmpl, err := template.New("").Funcs(template.FuncMap{
		"style": func() template.CSS { return template.CSS(style) },
		"age":   age,
		"utc":   utc,
	}).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("inboxui: parsing the templates: %w", err)
	}
	return tmpl, nil
}

// age is how long ago t was, to the second; "" for the zero time.
func age(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}

// utc is t in UTC, to the millisecond; "" for the zero time.
func utc(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// view is what every page knows of the request: where the handler is mounted, the
// tenant it looks at, and who looks.
type view struct {
	Path     string
	Tenant   string
	Tenants  bool // the store routes by tenant
	Operator string
}

// viewOf reads the view of r: the tenant from the query (or a POST's form).
func (h *Handler) viewOf(r *http.Request) view {
	_, tenants := h.cfg.Store.(tenantLister)
	v := view{Path: h.cfg.Path, Tenants: tenants, Operator: operatorOf(r.Context())}
	if tenants {
		v.Tenant = r.FormValue("tenant")
	}
	return v
}

// Link returns the URL of the page at rel under the handler's path, for the view's
// tenant, with the pairs of kv (name, value...) as its query.
func (v view) Link(rel string, kv ...string) string {
	q := url.Values{}
	if v.Tenant != "" {
		q.Set("tenant", v.Tenant)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	if len(q) == 0 {
		return v.Path + rel
	}
	return v.Path + rel + "?" + q.Encode()
}

// AllTenants returns the view with no tenant chosen.
func (v view) AllTenants() view { v.Tenant = ""; return v }

// WithTenant returns the view of tenant t.
func (v view) WithTenant(t string) view { v.Tenant = t; return v }

// layoutData is what layout.html renders around a page's body.
type layoutData struct {
	Title string
	View  view
	Body  template.HTML // the output of a template of this package, escaped there
}

// render writes the page template name with data inside the layout, with status.
func (h *Handler) render(w http.ResponseWriter, v view, status int, title, name string, data any) {
	body, err := h.execute(name, data)
	if err != nil {
		h.cfg.Logger.Error("inboxui: rendering the page", "page", name, "error", err.Error())
		http.Error(w, "500 internal server error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	var page bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&page, "layout", layoutData{Title: title, View: v, Body: body}); err != nil {
		h.cfg.Logger.Error("inboxui: rendering the layout", "page", name, "error", err.Error())
		http.Error(w, "500 internal server error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(page.Bytes())
}

// execute renders one template of this package to HTML.
func (h *Handler) execute(name string, data any) (template.HTML, error) {
	var b bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		return "", err
	}
	return template.HTML(b.String()), nil // html/template escaped every value
}

// message is the data of message.html: a sentence, and where to go on.
type message struct {
	View    view
	Heading string
	Text    string
	Error   bool
	Back    string // a URL under the handler's path
}

// fail renders an error page with status.
func (h *Handler) fail(w http.ResponseWriter, v view, status int, heading string, err error) {
	h.render(w, v, status, heading, "message", message{View: v, Heading: heading, Text: err.Error(), Error: true, Back: v.Link("")})
}

// tenantLister is a store that lists its tenants (inbox.TenantStore).
type tenantLister interface {
	inbox.Store
	Tenants(ctx context.Context) ([]string, error)
}
