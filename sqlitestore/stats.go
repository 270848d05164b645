package sqlitestore

import (
	"context"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// The optional store abilities the table metrics and the consumer-name check use.
var (
	_ contract.ConsumerNeighbours = (*Store)(nil)
	_ contract.AttemptCounter     = (*Store)(nil)
)

// NeighbourConsumers implements inbox.ConsumerNeighbours: the consumer itself if it has
// keys, then the names before and after it, each a seek on the primary key's index.
func (s *Store) NeighbourConsumers(ctx context.Context, consumer string) ([]string, error) {
	t := `"` + s.cfg.Table + `"`
	rows, err := s.db.QueryContext(ctx,
		`SELECT * FROM (SELECT "consumer" FROM `+t+` WHERE "consumer" = ?1 LIMIT 1)
		UNION ALL SELECT * FROM (SELECT "consumer" FROM `+t+` WHERE "consumer" < ?1 ORDER BY "consumer" DESC LIMIT 1)
		UNION ALL SELECT * FROM (SELECT "consumer" FROM `+t+` WHERE "consumer" > ?1 ORDER BY "consumer" LIMIT 1)`, consumer)
	if err != nil {
		return nil, s.wrap("reading the consumer names next to "+consumer, err)
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, s.wrap("reading the consumer names next to "+consumer, err)
		}
		if c == consumer {
			return nil, nil
		}
		found = append(found, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("reading the consumer names next to "+consumer, err)
	}
	return found, nil
}

// UnfinishedAttempts implements inbox.AttemptCounter: one GROUP BY over the attempts
// table, which holds only attempts in flight and those whose process died.
func (s *Store) UnfinishedAttempts(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT "consumer", COUNT(*) FROM "`+s.cfg.Table+`_attempts" GROUP BY "consumer"`)
	if err != nil {
		return nil, s.wrap("counting unfinished attempts", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var consumer string
		var n int64
		if err := rows.Scan(&consumer, &n); err != nil {
			return nil, s.wrap("counting unfinished attempts", err)
		}
		out[consumer] = n
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("counting unfinished attempts", err)
	}
	return out, nil
}

// Stats implements inbox.Store.
func (s *Store) Stats(ctx context.Context) ([]contract.ConsumerStats, error) {
	rows, err := s.db.QueryContext(ctx, s.sql.stats)
	if err != nil {
		return nil, s.wrap("reading stats", err)
	}
	defer rows.Close()
	var stats []contract.ConsumerStats
	for rows.Next() {
		var c contract.ConsumerStats
		var oldest int64
		if err := rows.Scan(&c.Consumer, &c.Keys, &oldest); err != nil {
			return nil, s.wrap("reading stats", err)
		}
		c.Oldest = time.UnixMicro(oldest).UTC()
		stats = append(stats, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("reading stats", err)
	}
	return stats, nil
}

var _ contract.AttemptLister = (*Store)(nil)

// micros reads a time stored as microseconds since the Unix epoch.
func micros(us int64) (time.Time, error) { return time.UnixMicro(us).UTC(), nil }

// AttemptAges implements inbox.AttemptLister: one GROUP BY over the attempts table.
func (s *Store) AttemptAges(ctx context.Context) ([]contract.AttemptAge, error) {
	ages, err := sqlstore.AttemptAges(ctx, s.db, `SELECT "consumer", COUNT(*), MIN("started_at") FROM "`+
		s.cfg.Table+`_attempts" GROUP BY "consumer" ORDER BY "consumer"`, micros)
	if err != nil {
		return nil, s.wrap("reading the attempts' ages", err)
	}
	return ages, nil
}

// Attempts implements inbox.AttemptLister: a seek on the primary key's first column,
// then a sort of the consumer's attempts (few: those in flight and those that died).
func (s *Store) Attempts(ctx context.Context, consumer string, limit int) ([]contract.Attempt, error) {
	if err := sqlstore.CheckAttemptLimit(limit); err != nil {
		return nil, err
	}
	list, err := sqlstore.ListAttempts(ctx, s.db, `SELECT "consumer", "key", "attempt", "started_at" FROM "`+
		s.cfg.Table+`_attempts" WHERE "consumer" = ?1 ORDER BY "started_at", "key", "attempt" LIMIT ?2`, micros, consumer, limit)
	if err != nil {
		return nil, s.wrap("listing the attempts of "+consumer, err)
	}
	return list, nil
}
