package postgresstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

var (
	_ contract.AttemptCounter = (*Store)(nil)
	_ contract.AttemptCounter = (*SQLStore)(nil)
	_ contract.AttemptChecker = (*Store)(nil)
	_ contract.AttemptChecker = (*SQLStore)(nil)
)

// UnfinishedAttempts implements AttemptCounter: one GROUP BY over the attempts table,
// which holds only attempts in flight and those that died.
func (s *Store) UnfinishedAttempts(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.Query(ctx, `SELECT consumer, count(*) FROM `+pgName(s.cfg.Schema, s.cfg.Table+"_attempts")+` GROUP BY consumer`)
	if err != nil {
		return nil, s.wrap("counting unfinished attempts", err)
	}
	out := map[string]int64{}
	var consumer string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&consumer, &n}, func() error { out[consumer] = n; return nil })
	if err != nil {
		return nil, s.wrap("counting unfinished attempts", err)
	}
	return out, nil
}

// UnfinishedAttempts implements AttemptCounter.
func (s *SQLStore) UnfinishedAttempts(ctx context.Context) (map[string]int64, error) {
	out, err := sqlstore.CountByConsumer(ctx, s.db, `SELECT consumer, count(*) FROM `+pgName(s.cfg.Schema, s.cfg.Table+"_attempts")+` GROUP BY consumer`)
	if err != nil {
		return nil, s.wrap("counting unfinished attempts", err)
	}
	return out, nil
}

var (
	_ contract.ConsumerNeighbours = (*Store)(nil)
	_ contract.ConsumerNeighbours = (*SQLStore)(nil)
	_ contract.StoredReader       = (*Store)(nil)
	_ contract.StoredReader       = (*SQLStore)(nil)
)

// The SQL stores' ConsumerNeighbours: each name comes from the primary key's index
// ((consumer, key)), by an equality or a range seek with LIMIT 1, never a scan.

// postgresNeighbours is the PostgreSQL query on t, the quoted table name: the consumer itself, if it has keys, then
// the names before and after it, in one round trip.
func postgresNeighbours(t string) string {
	return `(SELECT consumer FROM ` + t + ` WHERE consumer = $1 LIMIT 1)
		UNION ALL (SELECT consumer FROM ` + t + ` WHERE consumer < $1 ORDER BY consumer DESC LIMIT 1)
		UNION ALL (SELECT consumer FROM ` + t + ` WHERE consumer > $1 ORDER BY consumer LIMIT 1)`
}

// NeighbourConsumers implements ConsumerNeighbours.
func (s *Store) NeighbourConsumers(ctx context.Context, consumer string) ([]string, error) {
	rows, err := s.db.Query(ctx, postgresNeighbours(s.sql.table), consumer)
	if err != nil {
		return nil, s.wrap("reading the consumer names next to "+consumer, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.wrap("reading the consumer names next to "+consumer, err)
	}
	return sqlstore.Neighbours(consumer, found), nil
}

// NeighbourConsumers implements ConsumerNeighbours.
func (s *SQLStore) NeighbourConsumers(ctx context.Context, consumer string) ([]string, error) {
	found, err := sqlstore.QueryStrings(ctx, s.db, postgresNeighbours(s.sql.table), consumer)
	if err != nil {
		return nil, s.wrap("reading the consumer names next to "+consumer, err)
	}
	return sqlstore.Neighbours(consumer, found), nil
}

// Stats implements Store.
func (s *SQLStore) Stats(ctx context.Context) ([]contract.ConsumerStats, error) {
	rows, err := s.db.QueryContext(ctx, s.sql.stats)
	if err != nil {
		return nil, s.wrap("reading stats", err)
	}
	defer rows.Close()
	var stats []contract.ConsumerStats
	for rows.Next() {
		var c contract.ConsumerStats
		if err := rows.Scan(&c.Consumer, &c.Keys, &c.Oldest); err != nil {
			return nil, s.wrap("reading stats", err)
		}
		stats = append(stats, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("reading stats", err)
	}
	return stats, nil
}

// Stats implements Store.
func (s *Store) Stats(ctx context.Context) ([]contract.ConsumerStats, error) {
	rows, err := s.db.Query(ctx, s.sql.stats)
	if err != nil {
		return nil, s.wrap("reading stats", err)
	}
	stats, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (contract.ConsumerStats, error) {
		var c contract.ConsumerStats
		err := row.Scan(&c.Consumer, &c.Keys, &c.Oldest)
		return c, err
	})
	if err != nil {
		return nil, s.wrap("reading stats", err)
	}
	return stats, nil
}

var (
	_ contract.AttemptLister = (*Store)(nil)
	_ contract.AttemptLister = (*SQLStore)(nil)
)

// attemptAgesQuery and attemptsQuery are AttemptLister's statements on a, the quoted
// attempts table: a GROUP BY over it, and one consumer's rows (a seek on the primary
// key's first column, then a sort of that consumer's attempts, which are few: those in
// flight and those that died).
func attemptAgesQuery(a string) string {
	return `SELECT consumer, count(*), min(started_at) FROM ` + a + ` GROUP BY consumer ORDER BY consumer`
}

func attemptsQuery(a string) string {
	return `SELECT consumer, key, attempt, started_at FROM ` + a + ` WHERE consumer = $1 ORDER BY started_at, key, attempt LIMIT $2`
}

func (s *Store) attemptsTable() string    { return pgName(s.cfg.Schema, s.cfg.Table+"_attempts") }
func (s *SQLStore) attemptsTable() string { return pgName(s.cfg.Schema, s.cfg.Table+"_attempts") }

func sameTime(t time.Time) (time.Time, error) { return t, nil }

// AttemptAges implements AttemptLister.
func (s *Store) AttemptAges(ctx context.Context) ([]contract.AttemptAge, error) {
	rows, err := s.db.Query(ctx, attemptAgesQuery(s.attemptsTable()))
	if err != nil {
		return nil, s.wrap("reading the attempts' ages", err)
	}
	ages, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (contract.AttemptAge, error) {
		var a contract.AttemptAge
		err := row.Scan(&a.Consumer, &a.Unfinished, &a.Oldest)
		return a, err
	})
	if err != nil {
		return nil, s.wrap("reading the attempts' ages", err)
	}
	return ages, nil
}

// Attempts implements AttemptLister.
func (s *Store) Attempts(ctx context.Context, consumer string, limit int) ([]contract.Attempt, error) {
	if err := sqlstore.CheckAttemptLimit(limit); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, attemptsQuery(s.attemptsTable()), consumer, limit)
	if err != nil {
		return nil, s.wrap("listing the attempts of "+consumer, err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (contract.Attempt, error) {
		var a contract.Attempt
		err := row.Scan(&a.Consumer, &a.Key, &a.Token, &a.StartedAt)
		return a, err
	})
	if err != nil {
		return nil, s.wrap("listing the attempts of "+consumer, err)
	}
	return list, nil
}

// AttemptAges implements AttemptLister.
func (s *SQLStore) AttemptAges(ctx context.Context) ([]contract.AttemptAge, error) {
	ages, err := sqlstore.AttemptAges(ctx, s.db, attemptAgesQuery(s.attemptsTable()), sameTime)
	if err != nil {
		return nil, s.wrap("reading the attempts' ages", err)
	}
	return ages, nil
}

// Attempts implements AttemptLister.
func (s *SQLStore) Attempts(ctx context.Context, consumer string, limit int) ([]contract.Attempt, error) {
	if err := sqlstore.CheckAttemptLimit(limit); err != nil {
		return nil, err
	}
	list, err := sqlstore.ListAttempts(ctx, s.db, attemptsQuery(s.attemptsTable()), sameTime, consumer, limit)
	if err != nil {
		return nil, s.wrap("listing the attempts of "+consumer, err)
	}
	return list, nil
}
