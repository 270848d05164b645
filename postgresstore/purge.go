package postgresstore

import (
	"context"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Forget implements Store.
func (s *SQLStore) Forget(ctx context.Context, consumer, key string) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.sql.forget, consumer, contract.StorableKey(key))
	if err != nil {
		return false, s.wrap("forgetting the key", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, s.wrap("forgetting the key", err)
	}
	return n > 0, nil
}

// PurgeBatch implements Store, for inbox.Purge and inbox.PurgeEvery: call those.
func (s *SQLStore) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	var n contract.Purged
	if err := s.db.QueryRowContext(ctx, s.sql.purge, before, limit).Scan(&n.Keys, &n.Attempts); err != nil {
		return contract.Purged{}, s.wrap("purging", err)
	}
	return n, nil
}

// Forget implements Store.
func (s *Store) Forget(ctx context.Context, consumer, key string) (bool, error) {
	tag, err := s.db.Exec(ctx, s.sql.forget, consumer, contract.StorableKey(key))
	if err != nil {
		return false, s.wrap("forgetting the key", err)
	}
	return tag.RowsAffected() > 0, nil
}

// PurgeBatch implements Store, for inbox.Purge and inbox.PurgeEvery: call those.
func (s *Store) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	var n contract.Purged
	if err := s.db.QueryRow(ctx, s.sql.purge, before, limit).Scan(&n.Keys, &n.Attempts); err != nil {
		return contract.Purged{}, s.wrap("purging", err)
	}
	return n, nil
}
