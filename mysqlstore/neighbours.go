package mysqlstore

import (
	"context"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

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
