package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/internal/benchload"
)

// The benchmarks measure what the inbox costs against its baseline, in the same process
// and run: every worker alternates baseline and candidate op by op (benchload.Paired), so
// that the load of a shared machine falls on both alike; b.N is the ops of each side.
// See docs/benchmarks.md. Every one works at -benchtime=1x, as CI runs them; the big
// setups (10 M keys, 1 M keys to purge) need INBOX_BENCH_FULL=1 and run a small version
// otherwise. No timing is asserted.

// benchFull reports whether the big setups were asked for.
func benchFull() bool { return os.Getenv("INBOX_BENCH_FULL") == "1" }

// benchDB opens a database for one flavour, with relaxed durability when asked
// (synchronous_commit=off on PostgreSQL; innodb_flush_log_at_trx_commit=2 on MariaDB and
// MySQL, a global setting restored when the benchmark ends).
func benchDB(b *testing.B, flavour string, relaxed bool) (*pgxpool.Pool, *sql.DB) {
	b.Helper()
	variable, dsn := benchload.DSN(flavour)
	if flavour == "mysql" && dsn == "" {
		mysqlDB(b) // skips with the message
	}
	pool, db, closeFn, err := benchload.Open(context.Background(), flavour, relaxed)
	if err != nil {
		unavailable(b, flavour, variable, err)
	}
	b.Cleanup(closeFn)
	return pool, db
}

var benchFlavours = []string{"pgx", "sqlpg", "mariadb", "mysql"}

// benchTarget returns a Target on fresh tables, dropped when the benchmark ends.
func benchTarget(b *testing.B, pool *pgxpool.Pool, db *sql.DB, flavour string, stmts int, inboxTable string) *benchload.Target {
	b.Helper()
	ctx := context.Background()
	suffix := fmt.Sprintf("%d_%08x_%d", time.Now().UnixNano()%1e9, rand.Uint32(), stmts)
	tgt, err := benchload.NewTarget(ctx, flavour, pool, db, stmts, suffix, inboxTable)
	if tgt != nil {
		b.Cleanup(func() { _ = tgt.Drop(context.Background(), inboxTable == "") })
	}
	require.NoError(b, err)
	return tgt
}

func reportAB(b *testing.B, ab benchload.AB, a, c string) {
	b.ReportMetric(ab.A.Rate(), a+"/s")
	b.ReportMetric(ab.B.Rate(), c+"/s")
	b.ReportMetric(ab.Ratio(), "ratio")
}

// BenchmarkOverhead: the handler (one UPDATE, or UPDATE + INSERT + SELECT) with the inbox
// against the same handler in a plain transaction. The ratio is inbox over plain.
func BenchmarkOverhead(b *testing.B) {
	for _, flavour := range benchFlavours {
		for _, durability := range []string{"default", "relaxed"} {
			for _, stmts := range []int{1, 3} {
				for _, workers := range []int{1, 8} {
					name := fmt.Sprintf("%s/%s/stmts=%d/workers=%d", flavour, durability, stmts, workers)
					b.Run(name, func(b *testing.B) {
						pool, db := benchDB(b, flavour, durability == "relaxed")
						tgt := benchTarget(b, pool, db, flavour, stmts, "")
						b.ResetTimer()
						ab, err := benchload.Paired(context.Background(), workers, b.N, 0, tgt.Baseline, tgt.WithInbox)
						require.NoError(b, err)
						reportAB(b, ab, "plain", "inbox")
					})
				}
			}
		}
	}
}

// BenchmarkFloor: the message path on pgx against the same SQL written by hand
// (benchload's HandWritten: the key's INSERT folded into the BEGIN, the handler's
// UPDATE, COMMIT), so that the ratio is what the library's Go code costs beyond its SQL.
func BenchmarkFloor(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("pgx/workers=%d", workers), func(b *testing.B) {
			pool, db := benchDB(b, "pgx", false)
			tgt := benchTarget(b, pool, db, "pgx", 1, "")
			b.ResetTimer()
			ab, err := benchload.Paired(context.Background(), workers, b.N, 0, tgt.HandWritten, tgt.WithInbox)
			require.NoError(b, err)
			reportAB(b, ab, "handwritten", "inbox")
		})
	}
}

// BenchmarkDuplicates: skipped duplicates against first deliveries. The first-delivery
// side processes new keys and queues them; the duplicate side delivers a queued key again.
func BenchmarkDuplicates(b *testing.B) {
	for _, flavour := range benchFlavours {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", flavour, workers), func(b *testing.B) {
				pool, db := benchDB(b, flavour, false)
				tgt := benchTarget(b, pool, db, flavour, 1, "")
				ctx := context.Background()
				// Room for every op: Paired runs 2×b.N ops alternating per worker, and
				// with few ops and many workers more than b.N of them can be first
				// deliveries (b.N = 1, 8 workers: both ops may be A). A full channel
				// hung the run for good: benchmarks run outside go test's -timeout.
				done := make(chan string, 2*b.N+workers)
				first := func(ctx context.Context, key string) error {
					err := tgt.WithInbox(ctx, key)
					if err == nil {
						done <- key
					}
					return err
				}
				for i := range workers { // so that a worker starting with a duplicate has one
					require.NoError(b, first(ctx, fmt.Sprintf("seed-%d", i)))
				}
				dup := func(ctx context.Context, _ string) error { return tgt.WithInbox(ctx, <-done) }
				b.ResetTimer()
				ab, err := benchload.Paired(ctx, workers, b.N, 0, first, dup)
				require.NoError(b, err)
				b.StopTimer()
				applied, err := tgt.Applied(ctx)
				require.NoError(b, err)
				require.Equal(b, int64(ab.A.Ops+workers), applied, "every duplicate must have been skipped")
				reportAB(b, ab, "first", "dup")
			})
		}
	}
}

// BenchmarkCheckThenMark: the inbox against a naive store that SELECTs the key, runs the
// handler and INSERTs the key (ratio: inbox over naive); then both under 8 workers that
// each deliver the same keys, counting double applications for real.
func BenchmarkCheckThenMark(b *testing.B) {
	for _, flavour := range benchFlavours {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", flavour, workers), func(b *testing.B) {
				pool, db := benchDB(b, flavour, false)
				tgt := benchTarget(b, pool, db, flavour, 1, "")
				naive := func(ctx context.Context, key string) error { _, err := tgt.Naive(ctx, key); return err }
				b.ResetTimer()
				ab, err := benchload.Paired(context.Background(), workers, b.N, 0, naive, tgt.WithInbox)
				require.NoError(b, err)
				reportAB(b, ab, "naive", "inbox")
				if workers > 1 {
					b.StopTimer()
					keys := max(20, min(b.N, 500))
					b.ReportMetric(float64(raceDoubles(b, pool, db, flavour, workers, keys, true)), "naive-doubles")
					b.ReportMetric(float64(raceDoubles(b, pool, db, flavour, workers, keys, false)), "inbox-doubles")
				}
			})
		}
	}
}

// raceDoubles has workers goroutines each deliver the same keys, in the same order, and
// returns how many deliveries beyond one per key the handler applied.
func raceDoubles(b *testing.B, pool *pgxpool.Pool, db *sql.DB, flavour string, workers, keys int, naive bool) int64 {
	b.Helper()
	ctx := context.Background()
	tgt := benchTarget(b, pool, db, flavour, 1, "")
	prefix := fmt.Sprintf("race-%d", time.Now().UnixNano())
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := make(chan struct{})
	for range workers {
		wg.Go(func() {
			<-start
			for i := range keys {
				key := prefix + "-" + strconv.Itoa(i)
				var err error
				if naive {
					_, err = tgt.Naive(ctx, key)
				} else {
					err = tgt.WithInbox(ctx, key)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
	applied, err := tgt.Applied(ctx)
	require.NoError(b, err)
	return applied - int64(keys)
}

// bigTable is the inbox table of the table-size benchmark: 10 M keys with
// INBOX_BENCH_FULL=1 (kept between runs, drop it with DROP TABLE bench_inbox_10m,
// bench_inbox_10m_attempts), 20 k keys otherwise (dropped).
func bigTable(b *testing.B, pool *pgxpool.Pool, db *sql.DB, flavour string) string {
	b.Helper()
	ctx := context.Background()
	keys, table := 20_000, fmt.Sprintf("bench_inbox_small_%d", time.Now().UnixNano()%1e9)
	if benchFull() {
		keys, table = 10_000_000, "bench_inbox_10m"
	}
	tgt := benchTarget(b, pool, db, flavour, 1, table)
	if !benchFull() {
		b.Cleanup(func() { _ = tgt.Drop(context.Background(), true) })
	}
	have, err := tgt.Keys(ctx)
	require.NoError(b, err)
	if have >= int64(keys) {
		return table
	}
	start := time.Now()
	require.NoError(b, benchload.Prefill(ctx, tgt, "bench", "k", keys, 0))
	b.Logf("%s: %d keys loaded in %v", flavour, keys, time.Since(start).Round(time.Millisecond))
	return table
}

// BenchmarkTableSize: the inbox on a table holding 10 M keys (20 k without
// INBOX_BENCH_FULL=1) against an empty one. The ratio is big over empty.
func BenchmarkTableSize(b *testing.B) {
	for _, flavour := range []string{"pgx", "mariadb"} {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", flavour, workers), func(b *testing.B) {
				pool, db := benchDB(b, flavour, false)
				empty := benchTarget(b, pool, db, flavour, 1, "")
				big := benchTarget(b, pool, db, flavour, 1, bigTable(b, pool, db, flavour))
				b.ResetTimer()
				ab, err := benchload.Paired(context.Background(), workers, b.N, 0, empty.WithInbox, big.WithInbox)
				require.NoError(b, err)
				reportAB(b, ab, "empty", "big")
			})
		}
	}
}

// BenchmarkPurge: Store.PurgeBatch in a loop over old keys (1 M with INBOX_BENCH_FULL=1,
// 20 k otherwise) while 8 workers consume; keys deleted per second, and the workers'
// p50/p99 latency during the purge against the same time idle.
func BenchmarkPurge(b *testing.B) {
	for _, flavour := range []string{"pgx", "mariadb"} {
		b.Run(flavour, func(b *testing.B) {
			pool, db := benchDB(b, flavour, false)
			tgt := benchTarget(b, pool, db, flavour, 1, "")
			ctx := context.Background()
			old := 20_000
			if benchFull() {
				old = 1_000_000
			}
			for range b.N {
				b.StopTimer()
				require.NoError(b, benchload.Prefill(ctx, tgt, "bench", fmt.Sprintf("old%d-", time.Now().UnixNano()), old, 24*time.Hour))
				b.StartTimer()
				p, err := benchload.Purge(ctx, tgt, 8, 10_000)
				require.NoError(b, err)
				b.ReportMetric(float64(p.Deleted)/p.Elapsed.Seconds(), "keys/s")
				b.ReportMetric(float64(p.Idle.Percentile(50).Microseconds()), "idle-p50-µs")
				b.ReportMetric(float64(p.Idle.Percentile(99).Microseconds()), "idle-p99-µs")
				b.ReportMetric(float64(p.During.Percentile(50).Microseconds()), "purge-p50-µs")
				b.ReportMetric(float64(p.During.Percentile(99).Microseconds()), "purge-p99-µs")
				require.Equal(b, int64(old), p.Deleted)
			}
		})
	}
}

// TestCheckThenMarkRace: under 8 workers delivering the same keys at once, the inbox
// applies each key once (the naive store's count is what BenchmarkCheckThenMark reports).
func TestCheckThenMarkRace(t *testing.T) {
	t.Parallel()
	for _, flavour := range []string{"pgx", "mariadb"} {
		t.Run(flavour, func(t *testing.T) {
			t.Parallel()
			var pool *pgxpool.Pool
			var db *sql.DB
			if flavour == "pgx" {
				pool = pgPool(t)
			} else {
				db = mariaDB(t)
			}
			ctx := context.Background()
			tgt, err := benchload.NewTarget(ctx, flavour, pool, db, 1, fmt.Sprintf("race_%d", time.Now().UnixNano()%1e9), "")
			if tgt != nil {
				t.Cleanup(func() { _ = tgt.Drop(context.Background(), true) })
			}
			require.NoError(t, err)
			const workers, keys = 8, 50
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for range workers {
				wg.Go(func() {
					for i := range keys {
						if err := tgt.WithInbox(ctx, "race-"+strconv.Itoa(i)); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			applied, err := tgt.Applied(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(keys), applied, "each key applied exactly once")
		})
	}
}
