package inboxui

import (
	"context"
	"html/template"
	"net/http"
	"sort"
	"time"

	"github.com/watermill-inbox/inbox"
)

// The overview is a list of sections, each a template of its own (templates/<ID>.html)
// filled by its load func, rendered one after the other inside the layout. A section
// that fails shows its error and leaves the others be; one whose store lacks what it
// shows is left out. To add one: write its template and its load func, and add it to
// h.sections in routes; its actions are POST routes registered there with h.action.

// section is one part of the overview.
type section struct {
	// ID names the section's template and its anchor on the page.
	ID    string
	Title string
	// load reads what the section shows for the view v, with ctx carrying v's
	// tenant. shown is false when the store cannot fill it: the section is then left
	// out.
	load func(ctx context.Context, h *Handler, v view) (data any, shown bool, err error)
}

// renderedSection is a section as the overview shows it.
type renderedSection struct {
	ID, Title string
	Body      template.HTML
	Err       string
}

// overview is the page of every section.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	v := h.viewOf(r)
	ctx := tenantContext(r.Context(), v)
	var out []renderedSection
	for _, s := range h.sections {
		data, shown, err := s.load(ctx, h, v)
		if !shown {
			continue
		}
		rs := renderedSection{ID: s.ID, Title: s.Title}
		if err != nil {
			rs.Err = err.Error()
		} else if rs.Body, err = h.execute(s.ID, data); err != nil {
			rs.Err = "rendering the section: " + err.Error()
		}
		out = append(out, rs)
	}
	title := "inbox"
	if v.Tenant != "" {
		title = "inbox: tenant " + v.Tenant
	}
	h.render(w, v, http.StatusOK, title, "overview", out)
}

// tenantsSection lists the tenants of a TenantStore, each a link to its own view.
func tenantsSection() section {
	return section{ID: "tenants", Title: "Tenants", load: func(ctx context.Context, h *Handler, v view) (any, bool, error) {
		ts, ok := h.cfg.Store.(tenantLister)
		if !ok {
			return nil, false, nil
		}
		names, err := ts.Tenants(ctx)
		return struct {
			View  view
			Names []string
		}{v, names}, true, err
	}}
}

// consumerRow is one consumer of the consumers section.
type consumerRow struct {
	Consumer   string
	Keys       int64
	OldestKey  time.Time
	Attempts   int64
	OldestTry  time.Time
	HasAttempt bool
}

// consumersSection shows each consumer's keys and its oldest key (Store.Stats), and,
// when the store lists them, its unfinished attempts and the oldest one's age.
func consumersSection() section {
	return section{ID: "consumers", Title: "Consumers", load: func(ctx context.Context, h *Handler, v view) (any, bool, error) {
		stats, err := h.cfg.Store.Stats(ctx)
		if err != nil {
			return nil, true, err
		}
		rows := map[string]*consumerRow{}
		for _, s := range stats {
			rows[s.Consumer] = &consumerRow{Consumer: s.Consumer, Keys: s.Keys, OldestKey: s.Oldest}
		}
		lister, lists := h.cfg.Store.(inbox.AttemptLister)
		if lists {
			ages, err := lister.AttemptAges(ctx)
			if err != nil {
				return nil, true, err
			}
			for _, a := range ages {
				row := rows[a.Consumer]
				if row == nil {
					row = &consumerRow{Consumer: a.Consumer}
					rows[a.Consumer] = row
				}
				row.Attempts, row.OldestTry, row.HasAttempt = a.Unfinished, a.Oldest, true
			}
		}
		list := make([]consumerRow, 0, len(rows))
		for _, r := range rows {
			list = append(list, *r)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].Consumer < list[j].Consumer })
		return struct {
			View view
			Rows []consumerRow
			// Attempts: the store lists attempts; ListOne: one by one, here (a
			// TenantStore lists one tenant's).
			Attempts, ListOne bool
		}{v, list, lists, lists && (!v.Tenants || v.Tenant != "")}, true, nil
	}}
}

// offsetsSection shows the stored offsets of offset mode, each with a link to reset
// it. A TenantStore's are per tenant: without one chosen, the section says so.
func offsetsSection() section {
	return section{ID: "offsets", Title: "Offsets", load: func(ctx context.Context, h *Handler, v view) (any, bool, error) {
		store, ok := h.cfg.Store.(inbox.OffsetStore)
		if !ok {
			return nil, false, nil
		}
		data := struct {
			View       view
			Offsets    []inbox.PartitionOffset
			NeedTenant bool
		}{View: v}
		if v.Tenants && v.Tenant == "" {
			data.NeedTenant = true
			return data, true, nil
		}
		var err error
		data.Offsets, err = store.Offsets(ctx, "")
		return data, true, err
	}}
}

// tenantContext is ctx with the view's tenant, for a TenantStore to route by.
func tenantContext(ctx context.Context, v view) context.Context {
	if v.Tenant == "" {
		return ctx
	}
	return inbox.ContextWithTenant(ctx, v.Tenant)
}
