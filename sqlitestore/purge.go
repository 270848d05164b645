package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Forget implements inbox.Store: the key and its attempt count go in one transaction.
func (s *Store) Forget(ctx context.Context, consumer, key string) (bool, error) {
	key = contract.StorableKey(key)
	var n int64
	err := s.write(ctx, "forgetting the key", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.sql.forgetAttempts, consumer, key); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.sql.forget, consumer, key)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n > 0, err
}

// PurgeBatch implements inbox.Store.
func (s *Store) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	cutoff := before.UnixMicro()
	var n contract.Purged
	err := s.write(ctx, "purging", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.sql.purgeAttempts, cutoff, limit)
		if err == nil {
			n.Attempts, err = res.RowsAffected()
		}
		if err == nil {
			res, err = tx.ExecContext(ctx, s.sql.purge, cutoff, limit)
		}
		if err == nil {
			n.Keys, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return contract.Purged{}, err
	}
	return n, nil
}
