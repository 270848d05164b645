package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watermill-inbox/inbox"
)

// Store is an inbox.Store on a SQLite database through database/sql, with any of the
// drivers the package doc lists. Handlers get a *sql.Tx from inbox.TxFromContext.
//
// A claim inserts the key with INSERT … ON CONFLICT DO NOTHING as the first statement of
// its transaction, so the transaction takes the database's write lock before it reads
// anything: a concurrent duplicate waits for the first delivery's transaction to end
// (bounded by LockTimeout, or the connection's busy_timeout), then finds the key
// committed (a duplicate) or free (it processes the message).
type Store struct {
	db  inbox.SQLDB
	cfg Config
	sql queries

	infoMu sync.Mutex
	known  atomic.Pointer[dbInfo] // nil until read
}

var _ inbox.Store = (*Store)(nil)

type queries struct {
	insert, stored, setOutput              string
	startAttempt, endAttempt, attemptsOf   string
	forgetAttempts, forget                 string
	purgeAttempts, purge, stats, tableInfo string
	batchInsert, batchStored               string // batches: batch.go
	offsets                                offsetQueries
}

// New returns a Store over db: a *sql.DB opened with a SQLite driver (see DSN), or one
// of its *sql.Conn, which serves one message at a time. It checks the config but not
// the database; inbox.New calls Verify, which checks the tables and the connection's
// settings.
func New(db inbox.SQLDB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("inbox: invalid store config: db is nil: pass a *sql.DB opened with a SQLite driver, e.g. sql.Open(\"sqlite\", sqlitestore.DSN(\"app.db\")) with modernc.org/sqlite")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("inbox: invalid store config: %w", err)
	}
	t := `"` + cfg.Table + `"`
	a := `"` + cfg.Table + `_attempts"`
	where := ` WHERE "consumer" = ? AND "key" = ?`
	return &Store{db: db, cfg: cfg, sql: queries{
		insert:    `INSERT INTO ` + t + ` ("consumer", "key", "processed_at", "fingerprint") VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		stored:    `SELECT "fingerprint", "output" FROM ` + t + where,
		setOutput: `UPDATE ` + t + ` SET "output" = ?` + where,
		// Safe to resend: a second start of one token changes nothing.
		startAttempt:   `INSERT INTO ` + a + ` ("consumer", "key", "attempt", "started_at") VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		endAttempt:     `DELETE FROM ` + a + where + ` AND "attempt" = ?`,
		attemptsOf:     `SELECT "attempt" FROM ` + a + where + ` AND "attempt" <> ?`,
		forgetAttempts: `DELETE FROM ` + a + where,
		forget:         `DELETE FROM ` + t + where,
		purgeAttempts:  `DELETE FROM ` + a + ` WHERE ("consumer", "key") IN (SELECT "consumer", "key" FROM ` + a + ` WHERE "started_at" < ? ORDER BY "started_at" LIMIT ?)`,
		purge:          `DELETE FROM ` + t + ` WHERE ("consumer", "key") IN (SELECT "consumer", "key" FROM ` + t + ` WHERE "processed_at" < ? ORDER BY "processed_at" LIMIT ?)`,
		stats:          `SELECT "consumer", COUNT(*), MIN("processed_at") FROM ` + t + ` GROUP BY "consumer" ORDER BY "consumer"`,
		tableInfo:      `SELECT "name" FROM pragma_table_info(?)`,
		// The rows and the end follow: see insertChunk and readStored.
		batchInsert: `INSERT INTO ` + t + ` ("consumer", "key", "processed_at", "fingerprint") VALUES `,
		batchStored: `SELECT "key", "fingerprint" FROM ` + t + ` WHERE "consumer" = ? AND "key" IN (`,
		offsets:     newOffsetQueries(cfg.Table),
	}}, nil
}

// CreateSchema creates the store's tables and index if they do not exist, with the DDL
// of schema/sqlite.sql, in one transaction, for users who do not run a migration tool.
// It leaves the journal mode as it is: DSN asks for WAL.
func (s *Store) CreateSchema(ctx context.Context) error {
	ddl, err := inbox.SQLiteSchema(s.cfg.Table)
	if err != nil {
		return err
	}
	return s.write(ctx, "creating the schema", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, ddl)
		return err
	})
}

// Forget implements inbox.Store: the key and its attempt count go in one transaction.
func (s *Store) Forget(ctx context.Context, consumer, key string) (bool, error) {
	key = inbox.StorableKey(key)
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
func (s *Store) PurgeBatch(ctx context.Context, before time.Time, limit int) (inbox.Purged, error) {
	cutoff := before.UnixMicro()
	var n inbox.Purged
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
		return inbox.Purged{}, err
	}
	return n, nil
}

// Stats implements inbox.Store.
func (s *Store) Stats(ctx context.Context) ([]inbox.ConsumerStats, error) {
	rows, err := s.db.QueryContext(ctx, s.sql.stats)
	if err != nil {
		return nil, s.wrap("reading stats", err)
	}
	defer rows.Close()
	var stats []inbox.ConsumerStats
	for rows.Next() {
		var c inbox.ConsumerStats
		var oldest int64
		if err := rows.Scan(&c.Consumer, &c.Keys, &oldest); err != nil {
			return nil, s.wrap("reading stats", err)
		}
		c.Oldest = time.UnixMicro(oldest).UTC()
		stats = append(stats, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("reading stats", err)
	}
	return stats, nil
}

// now is the time the store writes: microseconds since the Unix epoch.
func now() int64 { return time.Now().UnixMicro() }
