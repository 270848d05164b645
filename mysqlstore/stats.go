package mysqlstore

import (
	"context"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

var (
	_ contract.AttemptCounter = (*Store)(nil)
	_ contract.AttemptChecker = (*Store)(nil)
)

// UnfinishedAttempts implements AttemptCounter.
func (s *Store) UnfinishedAttempts(ctx context.Context) (map[string]int64, error) {
	out, err := sqlstore.CountByConsumer(ctx, s.db, "SELECT `consumer`, COUNT(*) FROM `"+s.cfg.Table+"_attempts` GROUP BY `consumer`")
	if err != nil {
		return nil, s.wrap("counting unfinished attempts", err)
	}
	return out, nil
}

var (
	_ contract.ConsumerNeighbours = (*Store)(nil)
	_ contract.StoredReader       = (*Store)(nil)
)

// NeighbourConsumers implements ConsumerNeighbours, in three statements: vtgate plans
// each on its own over a sharded table.
func (s *Store) NeighbourConsumers(ctx context.Context, consumer string) ([]string, error) {
	t := "`" + s.cfg.Table + "`" // validated as an identifier by NewMySQLStore
	var found []string
	for _, q := range []string{
		"SELECT `consumer` FROM " + t + " WHERE `consumer` = ? LIMIT 1",
		"SELECT `consumer` FROM " + t + " WHERE `consumer` < ? ORDER BY `consumer` DESC LIMIT 1",
		"SELECT `consumer` FROM " + t + " WHERE `consumer` > ? ORDER BY `consumer` LIMIT 1",
	} {
		names, err := sqlstore.QueryStrings(ctx, s.db, q, consumer)
		if err != nil {
			return nil, s.wrap("reading the consumer names next to "+consumer, err)
		}
		found = append(found, names...)
	}
	return sqlstore.Neighbours(consumer, found), nil
}

// Stats implements Store.
func (s *Store) Stats(ctx context.Context) ([]contract.ConsumerStats, error) {
	rows, err := s.db.QueryContext(ctx, s.sql.stats)
	if err != nil {
		return nil, s.wrap("reading stats", err)
	}
	defer rows.Close()
	var stats []contract.ConsumerStats
	for rows.Next() {
		var c contract.ConsumerStats
		var oldest string
		if err := rows.Scan(&c.Consumer, &c.Keys, &oldest); err != nil {
			return nil, s.wrap("reading stats", err)
		}
		if c.Oldest, err = time.Parse(mysqlTimeFormat, oldest); err != nil {
			return nil, s.wrap("reading stats", err)
		}
		stats = append(stats, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("reading stats", err)
	}
	return stats, nil
}

var _ contract.AttemptLister = (*Store)(nil)

// mysqlTime reads a time that a statement formatted with DATE_FORMAT(…,
// '%Y-%m-%d %H:%i:%s.%f'), whatever the DSN's parseTime: the attempts' times are UTC.
func mysqlTime(s string) (time.Time, error) { return time.Parse(mysqlTimeFormat, s) }

// AttemptAges implements AttemptLister: one GROUP BY over the attempts table.
func (s *Store) AttemptAges(ctx context.Context) ([]contract.AttemptAge, error) {
	ages, err := sqlstore.AttemptAges(ctx, s.db, "SELECT `consumer`, COUNT(*), DATE_FORMAT(MIN(`started_at`), '%Y-%m-%d %H:%i:%s.%f') FROM `"+
		s.cfg.Table+"_attempts` GROUP BY `consumer` ORDER BY `consumer`", mysqlTime)
	if err != nil {
		return nil, s.wrap("reading the attempts' ages", err)
	}
	return ages, nil
}

// Attempts implements AttemptLister: a seek on the primary key's first column, then a
// sort of the consumer's attempts (few: those in flight and those that died).
func (s *Store) Attempts(ctx context.Context, consumer string, limit int) ([]contract.Attempt, error) {
	if err := sqlstore.CheckAttemptLimit(limit); err != nil {
		return nil, err
	}
	list, err := sqlstore.ListAttempts(ctx, s.db, "SELECT `consumer`, `key`, `attempt`, DATE_FORMAT(`started_at`, '%Y-%m-%d %H:%i:%s.%f') AS `started` FROM `"+
		s.cfg.Table+"_attempts` WHERE `consumer` = ? ORDER BY `started`, `key`, `attempt` LIMIT ?", mysqlTime, consumer, limit)
	if err != nil {
		return nil, s.wrap("listing the attempts of "+consumer, err)
	}
	return list, nil
}
