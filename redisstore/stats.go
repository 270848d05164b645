package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// statsBatch is the COUNT hint of each SCAN of Stats.
const statsBatch = 1000

// Stats implements inbox.Store: it walks the committed keys with SCAN (never KEYS), on
// every primary of a Cluster, reading each key's time in one pipeline per batch, so
// the server is never blocked; it costs O(keys) round trips / 1000 and is meant for
// occasional monitoring, not for every scrape of a busy inbox.
func (s *Store) Stats(ctx context.Context) ([]contract.ConsumerStats, error) {
	var mu sync.Mutex
	byConsumer := map[string]*contract.ConsumerStats{}
	err := s.forEachPrimary(ctx, func(ctx context.Context, c redis.Cmdable) error {
		iter := c.ScanType(ctx, 0, globEscape(s.cfg.Prefix+kindClaim+":{")+"*", statsBatch, "hash").Iterator()
		var batch []string
		flush := func() error {
			pipe := c.Pipeline()
			times := make([]*redis.StringCmd, len(batch))
			for i, name := range batch {
				times[i] = pipe.HGet(ctx, name, "t")
			}
			if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			for i, name := range batch {
				t, err := times[i].Int64()
				consumer, ok := parseConsumer(s.cfg.Prefix, name)
				if err != nil || !ok {
					continue // expired or deleted meanwhile, or not ours
				}
				st := byConsumer[consumer]
				if st == nil {
					st = &contract.ConsumerStats{Consumer: consumer}
					byConsumer[consumer] = st
				}
				st.Keys++
				if at := time.UnixMilli(t); st.Oldest.IsZero() || at.Before(st.Oldest) {
					st.Oldest = at
				}
			}
			batch = batch[:0]
			return nil
		}
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == statsBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		return flush()
	})
	if err != nil {
		return nil, fmt.Errorf("redisstore: counting keys: %w", err)
	}
	stats := make([]contract.ConsumerStats, 0, len(byConsumer))
	for _, st := range byConsumer {
		stats = append(stats, *st)
	}
	slices.SortFunc(stats, func(a, b contract.ConsumerStats) int { return strings.Compare(a.Consumer, b.Consumer) })
	return stats, nil
}

// globEscape escapes the glob characters of SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
