package postgresstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

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
