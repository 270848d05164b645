package postgresstore

import (
	"context"

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
