package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
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

// mysqlUTCDefault is the column default TiDB refuses.
const mysqlUTCDefault = " DEFAULT (UTC_TIMESTAMP(6))"

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

// mysqlSchemaFor returns the DDL of the store's tables for engine e: on Vitess, which
// has no offset mode, without the offsets table (a table outside the VSchema of a
// sharded keyspace could not be queried anyway).
func mysqlSchemaFor(e Engine, table string) (string, error) {
	ddl, err := Schema(table)
	switch {
	case err != nil:
		return "", err
	case e == TiDB:
		return tidbSchema(ddl), nil
	case e == Vitess:
		var kept []string
		for _, stmt := range sqlstore.Statements(ddl) {
			if !strings.Contains(stmt, "`"+table+"_offsets`") {
				kept = append(kept, stmt)
			}
		}
		return strings.Join(kept, ";\n") + ";\n", nil
	}
	return ddl, nil
}

// tidbSchema is schema/mysql.sql without the server-side UTC defaults.
func tidbSchema(ddl string) string {
	return strings.ReplaceAll(ddl, mysqlUTCDefault, "")
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

// createEngineSchema runs what CreateSchema needs beyond the DDL: on Vitess, the VSchema
// entries of both tables, unless the keyspace has them already. vtgate serves a change
// a moment after ALTER VSCHEMA returns, and its schema tracker may then serve an older
// version again (a rebuild begun before the change): it returns once two reads 100 ms
// apart both show the entries, and adds a lost one again.
func (s *Store) createEngineSchema(ctx context.Context) error {
	if s.cfg.Engine != Vitess {
		return nil
	}
	tables := []string{s.cfg.Table, s.cfg.Table + "_attempts"}
	seen := false // the last read showed both
	for try := 0; ; try++ {
		known, err := s.vschemaTables(ctx)
		if err != nil {
			return fmt.Errorf("inbox: reading the keyspace's VSchema: %w", err)
		}
		missing := 0
		for _, t := range tables {
			if known[t] {
				continue
			}
			missing++
			stmt := "ALTER VSCHEMA ON `" + t + "` ADD VINDEX `xxhash`(`key`) USING `xxhash`"
			if _, err := s.db.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("inbox: adding %q to the keyspace's VSchema (%s: run it as a user vtgate's --vschema-ddl-authorized-users allows, or apply schema/vitess-vschema.json with vtctldclient ApplyVSchema): %w", t, stmt, err)
			}
		}
		if missing == 0 && seen {
			return nil
		}
		seen = missing == 0
		if try == 20 {
			return fmt.Errorf("inbox: vtgate does not serve the VSchema entries of %q and %q after 20 ALTER VSCHEMA rounds", tables[0], tables[1])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// vschemaTables returns the tables of the connection's keyspace's VSchema.
func (s *Store) vschemaTables(ctx context.Context) (map[string]bool, error) {
	rows, err := s.db.QueryContext(ctx, "SHOW VSCHEMA TABLES")
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			_ = rows.Close()
			return nil, err
		}
		known[name] = true
	}
	return known, errors.Join(rows.Err(), rows.Close())
}

// verifyEngine checks, before the tables are read, what New must refuse on the engine:
// a server of another engine than the config's (checkServerEngine); on Vitess, tables
// missing from the VSchema (vtgate reports them only in its error
// text), and a best-effort commit across shards.
func (s *Store) verifyEngine(ctx context.Context) error {
	if err := s.checkServerEngine(ctx); err != nil || s.cfg.Engine != Vitess {
		return err
	}
	known, err := s.vschemaTables(ctx)
	if err != nil {
		return s.wrap("reading the keyspace's VSchema", err)
	}
	for _, t := range []string{s.cfg.Table, s.cfg.Table + "_attempts"} {
		if !known[t] {
			return fmt.Errorf("inbox: checking the tables: %w: table %q is not in the VSchema of the DSN's keyspace: run (*MySQLStore).CreateSchema, or create the tables of schema/mysql.sql and apply schema/vitess-vschema.json", contract.ErrNoTable, t)
		}
	}
	if s.cfg.AllowBestEffortCommit {
		return nil
	}
	var mode string
	if err := s.db.QueryRowContext(ctx, "SELECT @@transaction_mode").Scan(&mode); err != nil {
		return s.wrap("reading vtgate's transaction_mode", err)
	}
	if strings.EqualFold(mode, "MULTI") {
		return errors.New("inbox: vtgate's transaction_mode is MULTI, where a commit across shards is best-effort and can commit the key without the handler's writes or the other way round: " +
			"put the handler's rows on the key's shard and use SINGLE (transaction_mode=%27SINGLE%27 in the DSN), or TWOPC (docs/distributed-sql.md: after crashes it can leave unresolved transactions), " +
			"or set MySQLConfig.AllowBestEffortCommit if your handlers write to the key's shard only")
	}
	return nil
}

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
