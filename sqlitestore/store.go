package sqlitestore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
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
	db  sqlstore.DB
	cfg Config
	sql queries

	infoMu sync.Mutex
	known  atomic.Pointer[dbInfo] // nil until read
}

var _ contract.Store = (*Store)(nil)

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
func New(db sqlstore.DB, cfg Config) (*Store, error) {
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

// now is the time the store writes: microseconds since the Unix epoch.
func now() int64 { return time.Now().UnixMicro() }
