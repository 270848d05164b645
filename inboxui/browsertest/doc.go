// Package browsertest drives inboxui's page in a real headless Chromium (Debian's, over
// the DevTools protocol with chromedp): the pages render on each kind of store, an
// offset reset clicked through changes the database as the page shows it, names that
// hold HTML and script are shown as text and run nothing, and a request without
// credentials or from another origin is refused. It is a module of its own so that
// chromedp stays out of the inbox module's go.mod (ADR 148).
//
// INBOX_UI_SCREENSHOTS=DIR writes the pages' screenshots (PNG) to DIR; docs/img holds
// the committed ones:
//
//	cd inboxui/browsertest && INBOX_UI_SCREENSHOTS=../../docs/img go test -run TestScreenshots .
package browsertest
