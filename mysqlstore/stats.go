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
