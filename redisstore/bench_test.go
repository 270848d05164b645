package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/benchload"
	"github.com/watermill-inbox/inbox/redisstore"
)

// The handler of the benchmarks credits an account counter (INCRBY), behind the inbox or
// behind the seeds' check-then-set: GET the key, skip if it is there, else handle and SET
// it with the retention. Both run paired, op by op, in one process (benchload.Paired);
// see docs/benchmarks.md.

// benchAccounts spreads the credits over a few counters.
const benchAccounts = 64

type redisTarget struct {
	client *redis.Client
	prefix string
	ib     *inbox.Inbox
}

func newRedisTarget(b testing.TB) *redisTarget {
	client := sharedClient(b)
	_, ib := newStore(b, client, redisstore.Config{})
	return &redisTarget{client: client, prefix: testPrefix(b, client), ib: ib}
}

func (r *redisTarget) account(key string) string {
	var h uint32
	for i := 0; i < len(key); i++ {
		h = h*31 + uint32(key[i])
	}
	return r.prefix + "account:" + strconv.Itoa(int(h%benchAccounts))
}

// withInbox is the handler behind the inbox.
func (r *redisTarget) withInbox(ctx context.Context, key string) error {
	_, err := r.ib.Process(ctx, "bench", key, func(ctx context.Context) error {
		tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
		return tx.IncrBy(ctx, r.account(key), 1).Err()
	})
	return err
}

// checkThenSet is the seeds' deduplication: GET, handle, SET. Two deliveries racing
// both see no key and both apply.
func (r *redisTarget) checkThenSet(ctx context.Context, key string) error {
	seen := r.prefix + "seen:" + key
	switch err := r.client.Get(ctx, seen).Err(); {
	case err == nil:
		return nil // a duplicate
	case err != redis.Nil:
		return err
	}
	if err := r.client.IncrBy(ctx, r.account(key), 1).Err(); err != nil {
		return err
	}
	return r.client.Set(ctx, seen, 1, redisstore.DefaultRetention).Err()
}

// applied sums the account counters.
func (r *redisTarget) applied(ctx context.Context) (int64, error) {
	var total int64
	for a := range benchAccounts {
		n, err := r.client.Get(ctx, r.prefix+"account:"+strconv.Itoa(a)).Int64()
		if err != nil && err != redis.Nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// BenchmarkCheckThenSet: the inbox against check-then-set with 1 and 8 workers (ratio:
// inbox over check-then-set); with 8, both again under 8 workers that each deliver the
// same keys, counting double applications.
func BenchmarkCheckThenSet(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			tgt := newRedisTarget(b)
			b.ResetTimer()
			ab, err := benchload.Paired(context.Background(), workers, b.N, 0, tgt.checkThenSet, tgt.withInbox)
			require.NoError(b, err)
			b.ReportMetric(ab.A.Rate(), "check-then-set/s")
			b.ReportMetric(ab.B.Rate(), "inbox/s")
			b.ReportMetric(ab.Ratio(), "ratio")
			if workers > 1 {
				b.StopTimer()
				keys := max(20, min(b.N, 500))
				b.ReportMetric(float64(redisDoubles(b, workers, keys, true)), "check-then-set-doubles")
				b.ReportMetric(float64(redisDoubles(b, workers, keys, false)), "inbox-doubles")
			}
		})
	}
}

// redisDoubles has workers goroutines each deliver the same keys, in the same order, and
// returns how many deliveries beyond one per key the handler applied.
func redisDoubles(t testing.TB, workers, keys int, checkThenSet bool) int64 {
	ctx := context.Background()
	tgt := newRedisTarget(t)
	op := tgt.withInbox
	if checkThenSet {
		op = tgt.checkThenSet
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := make(chan struct{})
	for range workers {
		wg.Go(func() {
			<-start
			for i := range keys {
				if err := op(ctx, "race-"+strconv.Itoa(i)); err != nil {
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
		require.NoError(t, err)
	}
	applied, err := tgt.applied(ctx)
	require.NoError(t, err)
	return applied - int64(keys)
}

// TestCheckThenSetRace: under 8 workers delivering the same keys at once, the inbox
// applies each key once (check-then-set's count is what BenchmarkCheckThenSet reports).
func TestCheckThenSetRace(t *testing.T) {
	t.Parallel()
	start := time.Now()
	require.Zero(t, redisDoubles(t, 8, 200, false))
	t.Logf("8 workers × 200 keys through the inbox in %v; check-then-set doubles: %d", time.Since(start), redisDoubles(t, 8, 200, true))
}

// BenchmarkMaxAttempts: the inbox with MaxAttempts against the inbox without it, 1
// worker (ratio: with over without). The claim pipeline starts the attempt and the
// commit ends it, so counting adds no round trip, only the start script's server time.
func BenchmarkMaxAttempts(b *testing.B) {
	plain := newRedisTarget(b)
	counting := newRedisTarget(b)
	store, err := redisstore.New(counting.client, redisstore.Config{Prefix: counting.prefix})
	require.NoError(b, err)
	counting.ib, err = inbox.New(inbox.Config{Store: store, Consumer: "bench", MaxAttempts: 3})
	require.NoError(b, err)
	b.ResetTimer()
	ab, err := benchload.Paired(context.Background(), 1, b.N, 0, plain.withInbox, counting.withInbox)
	require.NoError(b, err)
	b.ReportMetric(ab.A.Rate(), "without/s")
	b.ReportMetric(ab.B.Rate(), "with/s")
	b.ReportMetric(ab.Ratio(), "ratio")
}
