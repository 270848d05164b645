package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Engine names the server behind a MySQLStore's DSN, for what differs from MySQL's
// and MariaDB's InnoDB. See docs/distributed-sql.md.
type Engine int

const (
	// InnoDB is MySQL 8+ or MariaDB 10.11+ with InnoDB tables.
	InnoDB Engine = iota

	// MySQLVitess is a vtgate of Vitess 0.24+ in front of a sharded keyspace. The store
	// then:
	//   - begins its transactions without SET TRANSACTION ISOLATION LEVEL, which vtgate
	//     would keep on the pooled connection for the application's next transactions;
	//     they run at the session's level (REPEATABLE READ unless the DSN sets
	//     transaction_isolation), and MySQLConfig.Isolation must stay sql.LevelDefault;
	//   - refuses, in New, a session whose transaction_mode is MULTI, where a commit
	//     across shards is best-effort and can commit in part (see
	//     MySQLConfig.AllowBestEffortCommit);
	//   - adds its tables to the keyspace's VSchema in CreateSchema, sharded by the key
	//     (xxhash vindex on `key`), so that a key and its attempts row share a shard;
	//   - purges by reading the oldest keys first, then deleting them one by one, since
	//     vtgate refuses a DELETE with ORDER BY and LIMIT across shards.
	Vitess

	// MySQLTiDB is TiDB 8+ in its default pessimistic transaction mode. The store then
	// writes processed_at and started_at itself (TiDB refuses the schema's DEFAULT
	// (UTC_TIMESTAMP(6)); CreateSchema and schema/tidb.sql leave it out), reads a
	// duplicate's stored row with FOR UPDATE (TiDB refuses LOCK IN SHARE MODE), and
	// accepts only READ COMMITTED and REPEATABLE READ, the levels TiDB has.
	TiDB
)

// String returns the engine's name.
func (e Engine) String() string {
	switch e {
	case InnoDB:
		return "MySQLInnoDB"
	case Vitess:
		return "MySQLVitess"
	case TiDB:
		return "MySQLTiDB"
	}
	return fmt.Sprintf("MySQLEngine(%d)", int(e))
}

// TiDB's own error numbers the store classifies as contention.
const (
	tidbWriteConflict = 9007 // ErrWriteConflict: an optimistic transaction lost at commit
	tidbRetryable     = 8022 // ErrTxnRetryable
	tidbUnknownError  = 1105 // ER_UNKNOWN_ERROR: among others, a pessimistic statement that ran out of retries
)

// tidbLockRetries reports TiDB's error 1105 "pessimistic lock retry limit reached": TiDB
// retries a pessimistic locking statement (a claim's INSERT, or its locking read) whose
// keys others keep changing up to its pessimistic-txn.max-retry-count (256), then gives
// up with that generic number. The statement did nothing; the message comes again.
func (s *Store) tidbLockRetries(myErr *mysql.MySQLError) bool {
	return s.cfg.Engine == TiDB && myErr.Number == tidbUnknownError && strings.Contains(myErr.Message, "retry limit reached")
}

// getLock runs GET_LOCK(name, wait) on conn into got. TiDB keeps its named locks in a
// table of its own, taken by a pessimistic statement: with many sessions taking locks at
// once it can run out of retries (1105 "pessimistic lock retry limit reached"; seen on
// 1 CreateSchema in 80 with 8 creators at once, and on a purge turn beside the test
// suite) having taken nothing. That is asked again for at most retryFor; any other error,
// or the last one, is returned.
func (s *Store) getLock(ctx context.Context, conn interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, name string, wait int, retryFor time.Duration, got *sql.NullInt64) error {
	deadline := time.Now().Add(retryFor)
	for {
		err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, wait).Scan(got)
		var myErr *mysql.MySQLError
		if err == nil || !errors.As(err, &myErr) || !s.tidbLockRetries(myErr) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// engineOf tells the engine from the server's VERSION(): TiDB's says "TiDB" (e.g.
// "8.0.11-TiDB-v8.4.0"), vtgate's "Vitess" (e.g. "8.4.6-Vitess", answered by vtgate
// itself for a SELECT VERSION() alone), MySQL's and MariaDB's neither. ok is false for
// those: a server can be configured to say anything, so only a positive sighting counts.
func engineOf(version string) (e Engine, ok bool) {
	switch {
	case strings.Contains(version, "TiDB"):
		return TiDB, true
	case strings.Contains(version, "Vitess"):
		return Vitess, true
	}
	return InnoDB, false
}

// EngineOf asks the server behind db which engine it is, from its VERSION():
// MySQLTiDB or MySQLVitess when it says so, MySQLInnoDB otherwise (MySQL, MariaDB, or a
// server configured to hide what it is). Set MySQLConfig.Engine from it when a program
// takes DSNs of any of them (the inbox CLI does); a store whose Engine disagrees with
// what the server says fails in CreateSchema and New, naming the setting.
func EngineOf(ctx context.Context, db SQLDB) (Engine, error) {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return InnoDB, fmt.Errorf("inbox: reading the server's version: %w", err)
	}
	e, _ := engineOf(version)
	return e, nil
}

// checkServerEngine refuses, in CreateSchema and New, a server that says it is TiDB or
// Vitess to a store configured for another engine: TiDB refuses the schema's UTC
// defaults (a raw error 1064), and on Vitess the store would send SET TRANSACTION that
// vtgate keeps, and create no VSchema.
func (s *Store) checkServerEngine(ctx context.Context) error {
	var version string
	if err := s.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return s.wrap("reading the server's version", err)
	}
	if seen, ok := engineOf(version); ok && seen != s.cfg.Engine {
		return fmt.Errorf("inbox: invalid store config: the server says it is %s (VERSION() is %q) and MySQLConfig.Engine is %v: set MySQLConfig.Engine to inbox.%v",
			strings.TrimPrefix(seen.String(), "MySQL"), version, s.cfg.Engine, seen)
	}
	return nil
}

// checkEngine validates the fields that depend on the engine; it runs before the
// isolation level is defaulted.
func (cfg Config) checkEngine() error {
	switch cfg.Engine {
	case InnoDB:
		if cfg.AllowBestEffortCommit {
			return errors.New("AllowBestEffortCommit is set and Engine is MySQLInnoDB: it applies to MySQLVitess only")
		}
	case Vitess:
		if cfg.Isolation != sql.LevelDefault {
			return fmt.Errorf("Isolation is %v and Engine is MySQLVitess: vtgate keeps SET TRANSACTION ISOLATION LEVEL on its pooled connection for the application's next transactions; leave Isolation unset and set the level for every connection in the DSN (transaction_isolation=%%27READ-COMMITTED%%27)", cfg.Isolation)
		}
	case TiDB:
		if cfg.AllowBestEffortCommit {
			return errors.New("AllowBestEffortCommit is set and Engine is MySQLTiDB: it applies to MySQLVitess only")
		}
		switch cfg.Isolation {
		case sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead:
		default:
			return fmt.Errorf("Isolation is %v and Engine is MySQLTiDB: TiDB has READ COMMITTED and REPEATABLE READ only", cfg.Isolation)
		}
	default:
		return fmt.Errorf("Engine is %v: use MySQLInnoDB, MySQLVitess or MySQLTiDB", cfg.Engine)
	}
	return nil
}

// forEngine adapts the InnoDB statements to engine e.
func (q *mysqlQueries) forEngine(e Engine, table, attempts string) {
	where := " WHERE `consumer` = ? AND `key` = ?"
	switch e {
	case TiDB:
		q.insert = "INSERT INTO " + table + " (`consumer`, `key`, `fingerprint`, `processed_at`) VALUES (?, ?, ?, UTC_TIMESTAMP(6))"
		q.stored = "SELECT `fingerprint`, `output` FROM " + table + where + " FOR UPDATE"
	case Vitess:
		// Scatter reads of the oldest rows; vtgate merges the shards' sorted results.
		q.purge = "SELECT `consumer`, `key` FROM " + table + " WHERE `processed_at` < ? ORDER BY `processed_at` LIMIT ?"
		q.purgeAttempts = "SELECT `consumer`, `key` FROM " + attempts + " WHERE `started_at` < ? ORDER BY `started_at` LIMIT ?"
		q.purgeOne = "DELETE FROM " + table + where + " AND `processed_at` < ?"
		q.purgeOneAttempt = "DELETE FROM " + attempts + where + " AND `started_at` < ?"
	}
}

// ownIsolation is the level of the store's own short transactions (attempts, Forget,
// purge): READ COMMITTED, except on Vitess, where setting it would stick to the
// connection.
func (s *Store) ownIsolation() sql.IsolationLevel {
	if s.cfg.Engine == Vitess {
		return sql.LevelDefault
	}
	return sql.LevelReadCommitted
}
