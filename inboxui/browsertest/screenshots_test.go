package browsertest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxui/internal/uitest"
)

// TestScreenshots takes the pages' screenshots for the docs (docs/img/inboxui-*.png)
// when INBOX_UI_SCREENSHOTS names a directory, on PostgreSQL and on a TenantStore,
// with a few consumers, dead attempts, offsets and the hostile names beside them.
func TestScreenshots(t *testing.T) {
	if os.Getenv("INBOX_UI_SCREENSHOTS") == "" {
		t.Skip("set INBOX_UI_SCREENSHOTS=DIR to write the pages' screenshots there")
	}
	browser := browser(t)
	stores := uitest.Stores(t)
	var pg, tenants uitest.Store
	for _, s := range stores {
		switch s.Name {
		case "pgx":
			pg = s
		case "tenants":
			tenants = s
		}
	}
	seedShowcase(t, pg)
	p := serve(t, pg.Store)
	ctx := tab(t, browser, true)
	run(t, ctx, chromedp.Navigate(p.url("", "")), chromedp.WaitVisible(chromedp.CSS("#consumers")))
	requireNoScriptRan(t, ctx)
	screenshot(t, ctx, "inboxui-overview.png")
	run(t, ctx, chromedp.Navigate(p.url("attempts?consumer=billing", "")), chromedp.WaitVisible(chromedp.CSS("td.token")))
	screenshot(t, ctx, "inboxui-attempts.png")
	run(t, ctx, chromedp.Navigate(p.url("offsets/reset?consumer=ledger&topic=orders&partition=2", "")), chromedp.WaitVisible(chromedp.CSS("#to")),
		chromedp.SendKeys(chromedp.CSS("#to"), "15000"), chromedp.Click(chromedp.CSS("#review")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	screenshot(t, ctx, "inboxui-reset-review.png")
	run(t, ctx, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#message")))
	screenshot(t, ctx, "inboxui-reset-done.png")

	uitest.Seed(t, tenants)
	other := tenants
	other.Tenant = uitest.EvilTenant
	uitest.Seed(t, other)
	pt := serve(t, tenants.Store)
	run(t, ctx, chromedp.Navigate(pt.url("", "")), chromedp.WaitVisible(chromedp.CSS("#tenants")))
	requireNoScriptRan(t, ctx)
	screenshot(t, ctx, "inboxui-tenants.png")
}

// seedShowcase writes what an inbox in use holds: three consumers with keys, two
// attempts of billing whose process died, a consumer in offset mode on four
// partitions, and the hostile names of uitest.Seed.
func seedShowcase(t *testing.T, s uitest.Store) {
	t.Helper()
	ctx := context.Background()
	uitest.Seed(t, s)
	ib, err := inbox.New(inbox.Config{Store: s.Store, Consumer: "seed", MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	for consumer, n := range map[string]int{"billing": 120, "receipts": 45, "notifications": 300} {
		for i := range n {
			if _, err := ib.Process(ctx, consumer, fmt.Sprintf("order-%d", 1000+i), func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, key := range []string{"order-2001", "order-2002"} {
		func() {
			defer func() { _ = recover() }()
			_, _ = ib.Process(ctx, "billing", key, func(context.Context) error { panic("killed") })
		}()
	}
	offsets := s.Store.(inbox.OffsetStore)
	for partition, next := range []int64{18211, 17954, 18390, 18102} {
		if _, err := offsets.SetOffset(ctx, "ledger", "orders", int32(partition), next); err != nil {
			t.Fatal(err)
		}
	}
}
