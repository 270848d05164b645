package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTenantScenario runs the seed scenario's faults over three tenant databases created
// for the run: workers route each message through an inbox.TenantStore to its tenant's
// database (opened on its first message), and the harness checks every tenant's ledger on
// its own: exact per tenant, no message or key in another tenant's database.
func TestTenantScenario(t *testing.T) {
	t.Parallel()
	faults := []string{"-workers", "8", "-messages", "60", "-tenants", "3", "-kill-every", "500ms", "-terminate-every", "200ms",
		"-fail-rate", "0.2", "-crash-rate", "0.05", "-handler-delay", "100ms", "-duration", "90s"}
	for _, tc := range []struct {
		db, transport string
		args          []string
	}{
		{"postgres", "direct", []string{"-copies", "8"}},
		{"mariadb", "direct", []string{"-copies", "8"}},
		{"postgres", "rabbitmq", nil}, // the tenant in each message's metadata (Config.Tenant)
	} {
		t.Run(tc.db+"/"+tc.transport, func(t *testing.T) {
			t.Parallel()
			need(t, tc.db, tc.transport)
			report := harness(t, tc.db, tc.transport, slices.Concat(faults, tc.args)...)
			require.Contains(t, report, "tenants                 3 databases, each ledger checked on its own")
			require.Contains(t, report, "ledger                  60 entries, 60 inbox keys, for 60 messages")
			require.Positive(t, figure(t, report, `duplicates skipped\s+(\d+)`), "duplicates")
			require.Positive(t, figure(t, report, `kills\s+(\d+) by the parent`)+figure(t, report, `by the parent, (\d+) after a commit`), "kills")
			require.Positive(t, figure(t, report, `connections terminated\s+(\d+)`), "terminated connections")
		})
	}
}
