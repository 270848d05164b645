package browsertest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxui/internal/uitest"
)

// The browser's cases, on each kind of store (PostgreSQL over pgx and database/sql,
// MariaDB, MySQL when set, SQLite, Redis, a TenantStore of SQLite files):
//
//   - the overview renders its sections, styled (the CSP lets its CSS in), with each
//     consumer's keys, and attempts and offsets where the store has them;
//   - the hostile consumer, key and topic show as text, no element of theirs exists,
//     and none of their scripts ran (window.pwned stays undefined);
//   - the attempts page lists the dead attempt's key as text;
//   - an offset reset clicked through (reset…, type 7, Review, Confirm) changes the
//     stored offset to 7, as the page then shows, and the action is logged;
//   - without credentials, every page is refused (401, a Basic challenge the browser
//     cannot answer) and shows nothing of the tables;
//   - a form on another site that posts a reset to the page, in a browser that holds
//     the operator's credentials, is refused (403) and changes nothing.
func TestPagesInChromium(t *testing.T) {
	browser := browser(t)
	for _, s := range uitest.Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			seeded := uitest.Seed(t, s)
			p := serve(t, s.Store)
			ctx := tab(t, browser, true)

			run(t, ctx, chromedp.Navigate(p.url("", s.Tenant)), chromedp.WaitVisible(chromedp.CSS("#consumers")))
			requireNoScriptRan(t, ctx)
			requireStyled(t, ctx)
			names := texts(t, ctx, "#consumers td.name")
			requireEqual(t, []string{"billing", uitest.EvilConsumer}, names, "the consumers, as text")
			requireEqual(t, "0", eval[string](t, ctx, `String(document.querySelectorAll("td.name b, td.name script, td img, td.name i").length)`), "no element of the tables' names")
			requireEqual(t, fmt.Sprint(seeded.Keys["billing"]), eval[string](t, ctx, `document.querySelector("#consumers tbody tr td.n").textContent`), "billing's keys")
			// Without credentials: 401 on every page, nothing of the tables.
			anon := tab(t, browser, false)
			refusedBefore := strings.Count(p.log.String(), `why="not authorized"`)
			for _, rel := range []string{"", "attempts?consumer=billing", "offsets/reset?consumer=billing&topic=orders&partition=3&to=1"} {
				// Headless Chromium answers a Basic challenge it has no credentials
				// for with this load error, and shows no page.
				err := chromedp.Do(anon, chromedp.Navigate(p.url(rel, s.Tenant)))
				requireEqual(t, true, err != nil && strings.Contains(err.Error(), "ERR_INVALID_AUTH_CREDENTIALS"), fmt.Sprintf("%s without credentials: %v", rel, err))
				body := eval[string](t, anon, `document.body ? document.body.innerText : ""`)
				requireEqual(t, false, strings.Contains(body, "billing"), rel+" without credentials shows the tables: "+body)
			}
			requireEqual(t, refusedBefore+3, strings.Count(p.log.String(), `why="not authorized"`), "the page refused the three requests: "+p.log.String())

			hasOffsets := eval[bool](t, ctx, `document.querySelector("#offsets") !== null`)
			requireEqual(t, s.Offsets, hasOffsets, "the offsets section is there when the store keeps offsets")
			if !s.Offsets {
				return
			}
			requireEqual(t, []string{"billing", "orders", uitest.EvilConsumer, uitest.EvilTopic}, texts(t, ctx, "#offsets td.name"), "the offsets' consumers and topics, as text")

			if s.Attempts { // the evil consumer's attempts, through its link
				run(t, ctx, chromedp.Click(chromedp.CSS(`#consumers a[href*="attempts"]`)), chromedp.WaitVisible(chromedp.CSS("td.token")))
				requireNoScriptRan(t, ctx)
				requireEqual(t, []string{uitest.EvilKey + "-dead"}, texts(t, ctx, "td.name"), "the dead attempt's key, as text")
				run(t, ctx, chromedp.Navigate(p.url("", s.Tenant)), chromedp.WaitVisible(chromedp.CSS("#offsets")))
			}

			// Reset the evil topic's offset, clicked through.
			run(t, ctx,
				chromedp.Click(chromedp.CSS(`#offsets a.button[href*="pwned%3D3"]`)),
				chromedp.WaitVisible(chromedp.CSS("#to")),
			)
			requireNoScriptRan(t, ctx)
			requireEqual(t, uitest.EvilConsumer, text(t, ctx, "#reset-consumer"), "the reset page's consumer")
			run(t, ctx, chromedp.SendKeys(chromedp.CSS("#to"), "7"), chromedp.Click(chromedp.CSS("#review")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
			requireEqual(t, "42", text(t, ctx, "#reset-from"), "the review shows the old offset")
			requireEqual(t, "7", text(t, ctx, "#reset-to"), "and the new one")
			requireEqual(t, int64(42), offset(t, s, uitest.EvilConsumer, uitest.EvilTopic), "a review changes nothing")
			run(t, ctx, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#message")))
			requireEqual(t, true, strings.Contains(text(t, ctx, "#message"), "the next offset was 42 and is 7 now"), "the result: "+text(t, ctx, "#message"))
			requireEqual(t, int64(7), offset(t, s, uitest.EvilConsumer, uitest.EvilTopic), "the database holds the offset the page showed")
			requireEqual(t, true, strings.Contains(p.log.String(), "action=offsets/reset operator=ops"), "the action is logged: "+p.log.String())
			run(t, ctx, chromedp.Click(chromedp.CSS("main a")), chromedp.WaitVisible(chromedp.CSS("#offsets")))
			requireEqual(t, "7", eval[string](t, ctx, `[...document.querySelectorAll("#offsets tbody tr")].find(r => r.cells[1].textContent === `+jsString(uitest.EvilTopic)+`).cells[3].textContent`), "the overview shows the new offset")
			requireNoScriptRan(t, ctx)

			// A form on another site posting a reset, in the operator's browser.
			evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				fmt.Fprintf(w, `<!doctype html><form method="post" action="%s">
<input name="consumer" value="billing"><input name="topic" value="orders"><input name="partition" value="3">
<input name="from" value="%d"><input name="to" value="0"><input name="tenant" value="%s">
<button id="go">win a prize</button></form>`, p.url("offsets/reset", ""), seeded.BillingOffset, s.Tenant)
			}))
			t.Cleanup(evil.Close)
			other := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1) // another site, not only another port
			// The refusal is plain text, which Chromium shows in a <pre>: the other
			// site's page has none.
			run(t, ctx, chromedp.Navigate(other), chromedp.WaitVisible(chromedp.CSS("#go")), chromedp.Click(chromedp.CSS("#go")), chromedp.WaitVisible(chromedp.CSS("pre")))
			requireEqual(t, true, strings.HasPrefix(eval[string](t, ctx, `document.location.href`), p.url("offsets/reset", "")), "the form posted to the page")
			body := eval[string](t, ctx, `document.body.innerText`)
			requireEqual(t, true, strings.Contains(body, "403 forbidden: cross-origin request"), "the cross-site POST: "+body)
			requireEqual(t, seeded.BillingOffset, offset(t, s, "billing", "orders"), "the cross-site POST changed nothing")
			requireEqual(t, true, strings.Contains(p.log.String(), `why="cross-origin request"`), "the refusal is logged")
		})
	}
}

// requireNoScriptRan checks that none of the hostile names' scripts ran.
func requireNoScriptRan(t *testing.T, ctx context.Context) {
	t.Helper()
	requireEqual(t, "undefined", eval[string](t, ctx, `typeof window.pwned`), "a script from the tables ran")
}

// requireStyled checks that the page's inline CSS applied: the CSP names its hash.
func requireStyled(t *testing.T, ctx context.Context) {
	t.Helper()
	requireEqual(t, "collapse", eval[string](t, ctx, `getComputedStyle(document.querySelector("table")).borderCollapse`), "the page's CSS did not apply")
}

func texts(t *testing.T, ctx context.Context, selector string) []string {
	t.Helper()
	return eval[[]string](t, ctx, `[...document.querySelectorAll(`+jsString(selector)+`)].map(e => e.textContent)`)
}

func text(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	return eval[string](t, ctx, `document.querySelector(`+jsString(selector)+`).textContent`)
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return result(t, ctx, chromedp.Evaluate[T](js))
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`", "$", "\\$").Replace(s) + "`"
}

func requireEqual[T any](t *testing.T, want, got T, what string) {
	t.Helper()
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("%s: want %q, got %q", what, fmt.Sprint(want), fmt.Sprint(got))
	}
}

// offset reads the stored next offset of partition 0 of topic (partition 3 of
// "orders"); -1 when none is stored.
func offset(t *testing.T, s uitest.Store, consumer, topic string) int64 {
	t.Helper()
	partition := int32(0)
	if topic == "orders" {
		partition = 3
	}
	offsets, err := s.Store.(inbox.OffsetStore).Offsets(s.Context(context.Background()), consumer)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offsets {
		if o.Topic == topic && o.Partition == partition {
			return o.Next
		}
	}
	return -1
}
