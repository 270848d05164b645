package browsertest

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxui"
)

const (
	operator = "ops"
	password = "browser-pw"
	mount    = "/ops/inbox/"
)

// chromium returns the path of Debian's Chromium. Missing, it is installed by
// scripts/chromium.sh under CI=true; elsewhere the test is skipped.
func chromium(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath("chromium"); err == nil {
		return path
	}
	if os.Getenv("CI") == "" {
		t.Skip("Chromium is not installed: run scripts/chromium.sh (apt-get install chromium), or set CI=true to have the test run it")
	}
	out, err := exec.Command("bash", "../../scripts/chromium.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/chromium.sh: %v\n%s", err, out)
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("scripts/chromium.sh ran, and chromium is still not on PATH: %v\n%s", err, out)
	}
	return path
}

// browser starts a headless Chromium with an empty profile of its own, closed when the
// test ends, and returns its context: tabs are chromedp.NewContext of it.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // root in CI: Chromium refuses its sandbox there
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		// No internet here: Chromium's own connections would only be refused.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter"),
		chromedp.Flag("hide-scrollbars", true),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// tab opens a tab of the browser, closed when the test ends, whose requests carry the
// operator's Basic credentials when signedIn, as a browser does once the operator
// typed them.
func tab(t *testing.T, browser context.Context, signedIn bool) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if signedIn {
		auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(operator+":"+password))
		if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}}); err != nil {
			t.Fatal(err)
		}
	}
	return ctx
}

// run runs actions in ctx and fails the test at the first error.
func run(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// result runs an action that returns a value, and fails the test on an error.
func result[T any](t *testing.T, ctx context.Context, action chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// page is the inboxui page of one store, served on 127.0.0.1 behind the operator's
// credentials, with the log it writes.
type page struct {
	*httptest.Server
	log *lockedLog
}

func serve(t *testing.T, store inbox.Store) page {
	t.Helper()
	log := &lockedLog{}
	ui, err := inboxui.New(inboxui.Config{
		Store:     store,
		Path:      mount,
		Authorize: inboxui.BasicAuth(operator, password),
		Logger:    slog.New(slog.NewTextHandler(log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(mount, ui)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return page{Server: srv, log: log}
}

// url returns the page's URL at rel under the mount point, with the tenant if any.
func (p page) url(rel, tenant string) string {
	u := p.URL + mount + rel
	if tenant != "" {
		sep := "?"
		if strings.Contains(rel, "?") {
			sep = "&"
		}
		u += sep + "tenant=" + queryEscape(tenant)
	}
	return u
}

// screenshot writes a full-page PNG of the tab to $INBOX_UI_SCREENSHOTS/name, when set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("INBOX_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := result(t, ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("screenshot: %s\n", filepath.Join(dir, name))
}
