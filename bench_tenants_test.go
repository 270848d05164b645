package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/benchload"
)

// BenchmarkTenantRouting: the same store behind a TenantStore (the tenant in the
// context, looked up in the open tenants, a reference held until the transaction
// ends) against the store used directly, op by op in one run. The ratio is routed over
// direct; the goal is at least 0.97.
func BenchmarkTenantRouting(b *testing.B) {
	for _, flavour := range []string{"pgx", "sqlpg", "mariadb"} {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", flavour, workers), func(b *testing.B) {
				ctx := context.Background()
				pool, db := benchDB(b, flavour, false)
				tgt := benchTarget(b, pool, db, flavour, 1, "")
				ts, err := inbox.NewTenantStore(inbox.TenantConfig{
					Lookup: func(_ context.Context, tenant string) (inbox.Tenant, error) {
						if tenant != "acme" {
							return inbox.Tenant{}, inbox.ErrUnknownTenant
						}
						return inbox.Tenant{Store: tgt.Store}, nil
					},
				})
				require.NoError(b, err)
				b.Cleanup(func() { _ = ts.Close() })
				routedInbox, err := inbox.New(inbox.Config{Store: ts, Consumer: "bench"})
				require.NoError(b, err)
				behind := tgt.Behind(routedInbox)
				routed := func(ctx context.Context, key string) error {
					return behind(inbox.ContextWithTenant(ctx, "acme"), key)
				}
				require.NoError(b, routed(ctx, "warm-up")) // opens the tenant
				b.ResetTimer()
				ab, err := benchload.Paired(ctx, workers, b.N, 0, tgt.WithInbox, routed)
				require.NoError(b, err)
				reportAB(b, ab, "direct", "routed")
			})
		}
	}
}
