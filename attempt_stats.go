package inbox

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// AttemptCounter is an optional Store ability, found with a type assertion: how many
// attempts (Config.MaxAttempts) of each consumer have started and not ended, from the
// attempts table. The table metrics (inboxprom.TableCollector, inboxotel.TableGauges)
// export it when the store has it. PostgresStore, SQLPostgresStore and MySQLStore
// implement it.
type AttemptCounter interface {
	// UnfinishedAttempts returns, per consumer, the attempts that started and have not
	// ended: running now, or whose process died (their rows stay until the purge). A
	// consumer without any is absent. Without MaxAttempts the map is empty.
	UnfinishedAttempts(ctx context.Context) (map[string]int64, error)
}

var (
	_ AttemptCounter = (*PostgresStore)(nil)
	_ AttemptCounter = (*SQLPostgresStore)(nil)
	_ AttemptCounter = (*MySQLStore)(nil)
)

// UnfinishedAttempts implements AttemptCounter: one GROUP BY over the attempts table,
// which holds only attempts in flight and those that died.
func (s *PostgresStore) UnfinishedAttempts(ctx context.Context) (map[string]int64, error) {
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
func (s *SQLPostgresStore) UnfinishedAttempts(ctx context.Context) (map[string]int64, error) {
	out, err := countByConsumer(ctx, s.db, `SELECT consumer, count(*) FROM `+pgName(s.cfg.Schema, s.cfg.Table+"_attempts")+` GROUP BY consumer`)
	if err != nil {
		return nil, s.wrap("counting unfinished attempts", err)
	}
	return out, nil
}

// UnfinishedAttempts implements AttemptCounter.
func (s *MySQLStore) UnfinishedAttempts(ctx context.Context) (map[string]int64, error) {
	out, err := countByConsumer(ctx, s.db, "SELECT `consumer`, COUNT(*) FROM `"+s.cfg.Table+"_attempts` GROUP BY `consumer`")
	if err != nil {
		return nil, s.wrap("counting unfinished attempts", err)
	}
	return out, nil
}

// countByConsumer runs a query of (consumer, count) rows on db.
func countByConsumer(ctx context.Context, db SQLDB, query string) (map[string]int64, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var consumer string
		var n int64
		if err := rows.Scan(&consumer, &n); err != nil {
			return nil, err
		}
		out[consumer] = n
	}
	return out, rows.Err()
}
