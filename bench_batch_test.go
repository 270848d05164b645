package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/internal/benchload"
)

// Batches and offset mode against their baselines, paired op by op as the other
// benchmarks (see docs/benchmarks.md). No timing is asserted.

// BenchmarkBatch: a batch of 100 messages through the inbox (Inbox.ProcessBatch, one
// statement for the keys, one for the handler's updates) against the same 100 messages
// one by one, each in an inbox transaction of its own (ratio batch/singles: how many
// times faster), and against the same batch in a plain transaction without the inbox
// (ratio inbox/plain); then the batch in offset mode (100 records of one partition: one
// row moved per batch) against the plain batch. b.N is the batches of each side.
func BenchmarkBatch(b *testing.B) {
	for _, flavour := range benchFlavours {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/size=100/workers=%d", flavour, workers), func(b *testing.B) {
				pool, db := benchDB(b, flavour, false)
				tgt := benchTarget(b, pool, db, flavour, 1, "")
				singles, batch, plain := tgt.BatchOps(100)
				ctx := context.Background()
				b.ResetTimer()
				vsSingles, err := benchload.Paired(ctx, workers, b.N, 0, singles, batch)
				require.NoError(b, err)
				vsPlain, err := benchload.Paired(ctx, workers, b.N, 0, plain, batch)
				require.NoError(b, err)
				offsetsVsPlain, err := benchload.Paired(ctx, workers, b.N, 0, plain, tgt.WithOffsetBatch(100))
				require.NoError(b, err)
				b.StopTimer()
				b.ReportMetric(offsetsVsPlain.Ratio(), "offsetbatch/plain")
				b.ReportMetric(100*vsSingles.A.Rate(), "singles-msgs/s")
				b.ReportMetric(100*vsSingles.B.Rate(), "batch-msgs/s")
				b.ReportMetric(vsSingles.Ratio(), "batch/singles")
				b.ReportMetric(vsPlain.Ratio(), "batch/plain")
				applied, err := tgt.Applied(ctx)
				require.NoError(b, err)
				require.EqualValues(b, 100*(vsSingles.A.Ops+vsSingles.B.Ops+vsPlain.A.Ops+vsPlain.B.Ops+offsetsVsPlain.A.Ops+offsetsVsPlain.B.Ops), applied, "every message applied once")
			})
		}
	}
}

// BenchmarkOffsets: offset mode, one message at a time (Inbox.ProcessOffsets with one
// position, each worker on a partition of its own), against the same handler in a
// plain transaction (ratio offsets/plain), and against key mode (Inbox.Process; ratio
// offsets/keys).
func BenchmarkOffsets(b *testing.B) {
	for _, flavour := range benchFlavours {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", flavour, workers), func(b *testing.B) {
				pool, db := benchDB(b, flavour, false)
				tgt := benchTarget(b, pool, db, flavour, 1, "")
				ctx := context.Background()
				b.ResetTimer()
				vsPlain, err := benchload.Paired(ctx, workers, b.N, 0, tgt.Baseline, tgt.WithOffsets)
				require.NoError(b, err)
				vsKeys, err := benchload.Paired(ctx, workers, b.N, 0, tgt.WithInbox, tgt.WithOffsets)
				require.NoError(b, err)
				b.StopTimer()
				b.ReportMetric(vsPlain.A.Rate(), "plain/s")
				b.ReportMetric(vsPlain.B.Rate(), "offsets/s")
				b.ReportMetric(vsPlain.Ratio(), "offsets/plain")
				b.ReportMetric(vsKeys.Ratio(), "offsets/keys")
			})
		}
	}
}
