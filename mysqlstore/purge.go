package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// purgeVitess deletes up to limit keys older than before, and as many attempt rows: it
// reads the oldest across the shards, then deletes each on its own shard.
func (s *Store) purgeVitess(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	cutoff := before.UTC().Format(mysqlTimeFormat)
	var n contract.Purged
	var err error
	if n.Attempts, err = s.purgeRows(ctx, s.sql.purgeAttempts, s.sql.purgeOneAttempt, cutoff, limit); err != nil {
		return n, s.wrap("purging", err)
	}
	if n.Keys, err = s.purgeRows(ctx, s.sql.purge, s.sql.purgeOne, cutoff, limit); err != nil {
		return n, s.wrap("purging", err)
	}
	return n, nil
}

func (s *Store) purgeRows(ctx context.Context, oldest, deleteOne, cutoff string, limit int) (int64, error) {
	rows, err := s.db.QueryContext(ctx, oldest, cutoff, limit)
	if err != nil {
		return 0, err
	}
	var keys [][2][]byte
	for rows.Next() {
		var k [2][]byte
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			_ = rows.Close()
			return 0, err
		}
		keys = append(keys, k)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, err
	}
	var n int64
	for _, k := range keys {
		res, err := s.db.ExecContext(ctx, deleteOne, k[0], k[1], cutoff)
		if err != nil {
			return n, err
		}
		d, err := res.RowsAffected()
		if err != nil {
			return n, err
		}
		n += d
	}
	return n, nil
}

// Forget implements Store.
func (s *Store) Forget(ctx context.Context, consumer, key string) (bool, error) {
	key = contract.StorableKey(key)
	var n int64
	err := s.inTx(ctx, s.db, func(tx *sql.Tx) error {
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
	if err != nil {
		return false, s.wrap("forgetting the key", err)
	}
	return n > 0, nil
}

// PurgeBatch implements Store, for inbox.Purge and inbox.PurgeEvery: call those.
func (s *Store) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	if s.cfg.Engine == Vitess {
		return s.purgeVitess(ctx, before, limit)
	}
	cutoff := before.UTC().Format(mysqlTimeFormat)
	var n contract.Purged
	err := s.inTx(ctx, s.db, func(tx *sql.Tx) error {
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
		return contract.Purged{}, s.wrap("purging", err)
	}
	return n, nil
}
