package mysqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

var (
	_ contract.PurgeTurns   = (*Store)(nil)
	_ contract.PurgeCounter = (*Store)(nil)
)

// CountPurge implements contract.PurgeCounter, for `inbox purge --dry-run`: one count
// per table (on Vitess, each across the shards).
func (s *Store) CountPurge(ctx context.Context, before time.Time) (contract.Purged, error) {
	cutoff := before.UTC().Format(mysqlTimeFormat)
	t, a := "`"+s.cfg.Table+"`", "`"+s.cfg.Table+"_attempts`"
	var n contract.Purged
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t+" WHERE `processed_at` < ?", cutoff).Scan(&n.Keys)
	if err == nil {
		err = s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+a+" WHERE `started_at` < ?", cutoff).Scan(&n.Attempts)
	}
	if err != nil {
		return contract.Purged{}, s.wrap("counting what a purge would delete", err)
	}
	return n, nil
}

// purgeVitess deletes up to limit keys older than before, and as many attempt rows: it
// reads the oldest across the shards, then deletes each on its own shard.
func (s *Store) purgeVitess(ctx context.Context, db sqlstore.DB, before time.Time, limit int) (contract.Purged, error) {
	cutoff := before.UTC().Format(mysqlTimeFormat)
	var n contract.Purged
	var err error
	if n.Attempts, err = purgeRows(ctx, db, s.sql.purgeAttempts, s.sql.purgeOneAttempt, cutoff, limit); err != nil {
		return n, s.wrap("purging", err)
	}
	if n.Keys, err = purgeRows(ctx, db, s.sql.purge, s.sql.purgeOne, cutoff, limit); err != nil {
		return n, s.wrap("purging", err)
	}
	return n, nil
}

func purgeRows(ctx context.Context, db sqlstore.DB, oldest, deleteOne, cutoff string, limit int) (int64, error) {
	rows, err := db.QueryContext(ctx, oldest, cutoff, limit)
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
		res, err := db.ExecContext(ctx, deleteOne, k[0], k[1], cutoff)
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
	return s.purgeOn(ctx, s.db, before, limit)
}

// purgeOn is PurgeBatch on db: the store's handle, or a purge turn's connection.
func (s *Store) purgeOn(ctx context.Context, db sqlstore.DB, before time.Time, limit int) (contract.Purged, error) {
	if s.cfg.Engine == Vitess {
		return s.purgeVitess(ctx, db, before, limit)
	}
	cutoff := before.UTC().Format(mysqlTimeFormat)
	var n contract.Purged
	err := s.inTx(ctx, db, func(tx *sql.Tx) error {
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

// A purge turn on MySQL, MariaDB, TiDB and Vitess (contract.PurgeTurns) is a named lock
// (GET_LOCK) of a connection of its own, named after the database and the table:
// "inbox.purge.<database>.<table>", or its hash when that is longer than the 64
// characters MySQL allows. The connection is closed when the turn ends, never given
// back to the pool with its lock or its wait_timeout. On Vitess, vtgate keeps the lock
// in a lock session of the client's session, and drops it with the client's connection;
// its wait_timeout is left alone (vtgate would reserve a connection on every shard for
// it).

// purgeTurnName returns the lock name of a purge turn on db's table.
func purgeTurnName(db, table string) string {
	name := "inbox.purge." + db + "." + table
	if len(name) > 64 {
		sum := sha256.Sum256([]byte(db + "." + table))
		name = "inbox.purge." + hex.EncodeToString(sum[:])[:40]
	}
	return name
}

// mysqlTurn is a purge turn held on conn.
type mysqlTurn struct {
	s       *Store
	conn    *sql.Conn
	name    string
	release sync.Once
}

func (t *mysqlTurn) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	return t.s.purgeOn(ctx, t.conn, before, limit)
}

func (t *mysqlTurn) Release(ctx context.Context) error {
	t.release.Do(func() { closeTurnConn(ctx, t.conn, t.name) })
	return nil
}

// closeTurnConn releases the lock (for the next holder's sake: closing the connection
// releases it too, a moment later on Vitess) and closes the connection, out of the pool
// for good.
func closeTurnConn(ctx context.Context, conn *sql.Conn, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if name != "" {
		var released sql.NullInt64 // Vitess serves lock functions in a SELECT of their own only
		_ = conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&released)
	}
	_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // database/sql closes it instead of pooling it
	_ = conn.Close()
}

// purgeTurnLockRetries bounds how long TakePurgeTurn asks TiDB again for the turn's
// lock when TiDB runs out of retries taking it (see getLock).
const purgeTurnLockRetries = 10 * time.Second

// TakePurgeTurn implements contract.PurgeTurns: see the notes above mysqlTurn. The turn
// takes one connection of the *sql.DB, and closes it when the turn ends; over a
// *sql.Conn it fails with errors.ErrUnsupported, as it cannot open a connection of its
// own.
func (s *Store) TakePurgeTurn(ctx context.Context, idle time.Duration) (contract.PurgeTurn, error) {
	pool, ok := s.db.(*sql.DB)
	if !ok {
		return nil, fmt.Errorf("inbox: %w: a purge turn needs a connection of its own, which a %T cannot lend: give the retention a store over a *sql.DB", errors.ErrUnsupported, s.db)
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return nil, s.wrap("acquiring a connection for the purge turn", err)
	}
	var database sql.NullString
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database)
	name := purgeTurnName(database.String, s.cfg.Table)
	if err == nil {
		// Vitess serves lock functions in a SELECT of their own only.
		err = s.getLock(ctx, conn, name, 0, purgeTurnLockRetries, &got)
	}
	switch {
	case err != nil:
		closeTurnConn(ctx, conn, "")
		return nil, s.wrap("taking the purge turn", err)
	case got.Int64 != 1:
		_ = conn.Close() // no lock taken, nothing changed: back to the pool
		return nil, nil
	}
	if s.cfg.Engine != Vitess {
		seconds := int64((idle + contract.IdleMargin + time.Second - 1) / time.Second)
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", seconds)); err != nil {
			closeTurnConn(ctx, conn, name)
			return nil, s.wrap("bounding the purge turn's idle time (wait_timeout)", err)
		}
	}
	return &mysqlTurn{s: s, conn: conn, name: name}, nil
}
