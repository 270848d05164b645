package inbox

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The SQL stores' ConsumerNeighbours: each name comes from the primary key's index
// ((consumer, key)), by an equality or a range seek with LIMIT 1, never a scan.

var (
	_ ConsumerNeighbours = (*PostgresStore)(nil)
	_ ConsumerNeighbours = (*SQLPostgresStore)(nil)
	_ ConsumerNeighbours = (*MySQLStore)(nil)
)

// postgresNeighbours is the PostgreSQL query on t, the quoted table name: the consumer itself, if it has keys, then
// the names before and after it, in one round trip.
func postgresNeighbours(t string) string {
	return `(SELECT consumer FROM ` + t + ` WHERE consumer = $1 LIMIT 1)
		UNION ALL (SELECT consumer FROM ` + t + ` WHERE consumer < $1 ORDER BY consumer DESC LIMIT 1)
		UNION ALL (SELECT consumer FROM ` + t + ` WHERE consumer > $1 ORDER BY consumer LIMIT 1)`
}

// neighbours returns nil when found holds consumer itself, and found otherwise.
func neighbours(consumer string, found []string) []string {
	for _, c := range found {
		if c == consumer {
			return nil
		}
	}
	return found
}

// NeighbourConsumers implements ConsumerNeighbours.
func (s *PostgresStore) NeighbourConsumers(ctx context.Context, consumer string) ([]string, error) {
	rows, err := s.db.Query(ctx, postgresNeighbours(s.sql.table), consumer)
	if err != nil {
		return nil, s.wrap("reading the consumer names next to "+consumer, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.wrap("reading the consumer names next to "+consumer, err)
	}
	return neighbours(consumer, found), nil
}

// NeighbourConsumers implements ConsumerNeighbours.
func (s *SQLPostgresStore) NeighbourConsumers(ctx context.Context, consumer string) ([]string, error) {
	found, err := queryStrings(ctx, s.db, postgresNeighbours(s.sql.table), consumer)
	if err != nil {
		return nil, s.wrap("reading the consumer names next to "+consumer, err)
	}
	return neighbours(consumer, found), nil
}

// NeighbourConsumers implements ConsumerNeighbours, in three statements: vtgate plans
// each on its own over a sharded table.
func (s *MySQLStore) NeighbourConsumers(ctx context.Context, consumer string) ([]string, error) {
	t := "`" + s.cfg.Table + "`" // validated as an identifier by NewMySQLStore
	var found []string
	for _, q := range []string{
		"SELECT `consumer` FROM " + t + " WHERE `consumer` = ? LIMIT 1",
		"SELECT `consumer` FROM " + t + " WHERE `consumer` < ? ORDER BY `consumer` DESC LIMIT 1",
		"SELECT `consumer` FROM " + t + " WHERE `consumer` > ? ORDER BY `consumer` LIMIT 1",
	} {
		names, err := queryStrings(ctx, s.db, q, consumer)
		if err != nil {
			return nil, s.wrap("reading the consumer names next to "+consumer, err)
		}
		found = append(found, names...)
	}
	return neighbours(consumer, found), nil
}
