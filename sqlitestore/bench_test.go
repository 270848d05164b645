package sqlitestore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/internal/benchload"
)

// BenchmarkSQLite pairs, op by op in one run (benchload.Paired), the inbox on a SQLite
// file with its baselines on the same file: the same statements written by hand over one
// connection (the floor: what the store's own code costs), and the handler in a plain
// transaction (what the extra row costs). Ratios are inbox over baseline. It runs at
// -benchtime=1x in CI; docs/benchmarks.md has the figures of longer runs (cmd/inbox-load).
func BenchmarkSQLite(b *testing.B) {
	ctx := context.Background()
	for _, baseline := range []string{"handwritten", "plain"} {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", baseline, workers), func(b *testing.B) {
				_, db, closeFn, err := benchload.Open(ctx, "sqlite", false)
				require.NoError(b, err)
				b.Cleanup(closeFn)
				tgt, err := benchload.NewTarget(ctx, "sqlite", nil, db, 1, "b", "")
				require.NoError(b, err)
				b.Cleanup(func() { _ = tgt.Drop(context.Background(), true) })
				base := tgt.HandWritten
				if baseline == "plain" {
					base = tgt.Baseline
				}
				b.ResetTimer()
				ab, err := benchload.Paired(ctx, workers, b.N, 0, base, tgt.WithInbox)
				require.NoError(b, err)
				b.ReportMetric(ab.A.Rate(), baseline+"/s")
				b.ReportMetric(ab.B.Rate(), "inbox/s")
				b.ReportMetric(ab.Ratio(), "ratio")
			})
		}
	}
}
