// Package inboxui is an operator's page for an inbox's tables: an http.Handler that a
// program mounts in its own server (and that "inbox ui --dsn ..." serves locally). It
// shows, per consumer, the keys kept and the oldest key, the attempts in flight (or
// whose process died) and how old they are, the stored offsets of offset mode per
// partition, and the tenants of a TenantStore; it resets an offset after a
// confirmation.
//
//	ui, err := inboxui.New(inboxui.Config{
//		Store:     store,
//		Path:      "/ops/inbox/",
//		Authorize: inboxui.BasicAuth("ops", os.Getenv("INBOX_UI_PASSWORD")),
//	})
//	mux.Handle("/ops/inbox/", ui)
//
// It lets no one in by default: New refuses a Config without Authorize, which every
// request goes through, GET and POST alike. Every action is a POST, refused when it
// comes from another origin (net/http's CrossOriginProtection: the browser's
// Sec-Fetch-Site header, or Origin against Host), and logged with the operator's name.
// What the tables hold (consumer names, keys, topics) is untrusted and rendered
// escaped by html/template; the page runs no script at all, and its
// Content-Security-Policy allows none. It never shows a DSN.
//
// The page is server-rendered from templates embedded in the binary, with its CSS
// inline: no build step, nothing fetched from the internet. It reads the store through
// its optional abilities (inbox.AttemptLister, inbox.OffsetStore, the TenantStore's
// tenants) and leaves out the sections a store cannot fill.
//
// It imports the inbox package and the standard library only.
package inboxui
