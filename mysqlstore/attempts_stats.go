package mysqlstore

import (
	"context"

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
