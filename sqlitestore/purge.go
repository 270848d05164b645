package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

var (
	_ contract.PurgeTurns   = (*Store)(nil)
	_ contract.PurgeCounter = (*Store)(nil)
)

// CountPurge implements contract.PurgeCounter, for `inbox purge --dry-run`.
func (s *Store) CountPurge(ctx context.Context, before time.Time) (contract.Purged, error) {
	cutoff := before.UnixMicro()
	var n contract.Purged
	err := s.db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM "`+s.cfg.Table+`" WHERE "processed_at" < ?), (SELECT COUNT(*) FROM "`+s.cfg.Table+`_attempts" WHERE "started_at" < ?)`,
		cutoff, cutoff).Scan(&n.Keys, &n.Attempts)
	if err != nil {
		return contract.Purged{}, s.wrap("counting what a purge would delete", err)
	}
	return n, nil
}

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

// A purge turn on SQLite (contract.PurgeTurns) is an exclusive advisory lock on one byte
// of a lock file next to the database (<database>-inbox-purge.lock), at an offset derived
// from the table's name, as an attempt's (ADR 82): the operating system drops it when
// the process dies. Advisory locks of one process do not conflict with each other, so
// the turns this process holds are kept in a registry too. SQLite has no session that
// a connection fault could take away: the turn is the process's until Release.

// purgeTurns are the turns this process holds, by database path and table, and the lock
// files it opened (never closed: closing one would drop every lock of the process on it).
var purgeTurns = struct {
	sync.Mutex
	held  map[string]bool
	files map[string]*os.File
}{held: map[string]bool{}, files: map[string]*os.File{}}

// sqliteTurn is a purge turn held by this process.
type sqliteTurn struct {
	s        *Store
	file     *os.File // nil for an in-memory database
	at       int64
	key      string
	released sync.Once
}

func (t *sqliteTurn) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	return t.s.PurgeBatch(ctx, before, limit)
}

func (t *sqliteTurn) Release(context.Context) error {
	t.released.Do(func() {
		purgeTurns.Lock()
		defer purgeTurns.Unlock()
		if t.file != nil {
			_ = unlockByte(t.file, t.at)
		}
		delete(purgeTurns.held, t.key)
	})
	return nil
}

// TakePurgeTurn implements contract.PurgeTurns: see the notes above sqliteTurn. idle
// plays no part: the turn is the process's, and goes with it.
func (s *Store) TakePurgeTurn(ctx context.Context, _ time.Duration) (contract.PurgeTurn, error) {
	info, err := s.info(ctx)
	if err != nil {
		return nil, err
	}
	t := &sqliteTurn{s: s, key: info.path + "\x00" + s.cfg.Table, at: attemptByte(s.cfg.Table)}
	purgeTurns.Lock()
	defer purgeTurns.Unlock()
	if purgeTurns.held[t.key] {
		return nil, nil
	}
	if info.path != "" {
		path := info.path + "-inbox-purge.lock"
		if t.file = purgeTurns.files[path]; t.file == nil {
			if t.file, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
				return nil, fmt.Errorf("inbox: taking the purge turn: opening its lock file: %w", err)
			}
			purgeTurns.files[path] = t.file
		}
		got, err := tryLockByte(t.file, t.at)
		if err != nil {
			return nil, fmt.Errorf("inbox: taking the purge turn: locking its byte in %s: %w", path, err)
		}
		if !got {
			return nil, nil
		}
	}
	purgeTurns.held[t.key] = true
	return t, nil
}
