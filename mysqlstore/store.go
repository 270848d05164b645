package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// SQLDB is what a database/sql store needs of a database. *sql.DB satisfies it, and so
// does *sql.Conn (which serves one message at a time). It is inbox.SQLDB.
type SQLDB = sqlstore.DB

// Config configures a MySQLStore.
type Config struct {
	// Table is the inbox table; the store also uses <Table>_attempts. Create both with
	// schema/mysql.sql or CreateSchema. Defaults to "inbox".
	Table string

	// Isolation is the isolation level of the transactions the store begins. Defaults to
	// sql.LevelDefault, which the store takes as READ COMMITTED (InnoDB's own default is
	// REPEATABLE READ).
	Isolation sql.IsolationLevel

	// SessionIsolation begins the transactions without setting an isolation level, so
	// they run at the session's (REPEATABLE READ unless the server or the DSN says
	// otherwise). That saves the round trip database/sql spends on SET TRANSACTION
	// ISOLATION LEVEL before every BEGIN (measured on MariaDB: a plain transaction that
	// sets READ COMMITTED runs at 0.905 of one that does not). InnoDB judges duplicates
	// the same at either level: the insert waits on the key's index entry, and the
	// stored row is read with a locking read, which sees the latest committed version.
	// Your handler's own statements then run at the session's level. It cannot be
	// combined with Isolation. Defaults to false.
	SessionIsolation bool

	// LockTimeout bounds how long a claim waits on a concurrent duplicate's transaction:
	// innodb_lock_wait_timeout, which counts whole seconds, so it is rounded up to the
	// next second. It applies to the inbox statement only: on MariaDB through SET
	// STATEMENT ... FOR; on MySQL it is set on the session and restored after the
	// insert, on every path (the store's transaction outlives a cancelled message
	// context, and a statement the driver abandons closes its connection). In a
	// transaction the inbox joins on MySQL, an owner whose context ends while the claim
	// runs makes database/sql roll back under it: the value then stays on that
	// connection until the next claim there restores it. When it expires the claim fails with ErrContended and the message comes
	// again. Defaults to 0: wait as long as the server's innodb_lock_wait_timeout allows
	// (50 s unless configured).
	LockTimeout time.Duration

	// Engine is the server behind the DSN: MySQLVitess or MySQLTiDB adapt the store to
	// what they do differently (see MySQLEngine). Defaults to MySQLInnoDB.
	Engine Engine

	// AllowBestEffortCommit lets New accept, on MySQLVitess, a vtgate whose
	// transaction_mode is MULTI. A transaction there that spans shards commits shard
	// after shard, and a failure in between commits the key without the handler's
	// writes (the message is lost) or the writes without the key (applied twice):
	// docs/distributed-sql.md shows it. Set it only when every handler writes to the
	// key's shard alone. Defaults to false.
	AllowBestEffortCommit bool
}

// Store is the inbox's store on MySQL 8+ or MariaDB 10.11+ (InnoDB), Vitess or TiDB
// (Config.Engine) through database/sql, with the driver github.com/go-sql-driver/mysql
// (inbox.MySQLStore). Handlers get a *sql.Tx from inbox.TxFromContext.
//
// Your methods: CreateSchema (or run schema/mysql.sql), Forget, Stats, UnfinishedAttempts
// and NeighbourConsumers; purge with inbox.Purge or inbox.PurgeEvery. The others (Claim,
// ClaimIn, PurgeBatch, Verify and the attempt methods) are the rest of Store, the
// contract between the inbox and its stores: the inbox calls them, not you.
//
// database/sql rolls the transaction back by itself when the message context is
// cancelled; the commit then fails with the context's error.
//
// It works with any DSN of that driver: it needs neither parseTime, multiStatements nor
// a particular clientFoundRows, time zone or collation.
//
// Over a *sql.DB, the key's INSERT is a statement prepared once per connection: without
// interpolateParams in the DSN the driver would otherwise prepare, execute and close it
// each time, two round trips instead of one.
type Store struct {
	db  sqlstore.DB
	cfg Config
	sql mysqlQueries

	prepareMu  sync.Mutex
	insertStmt atomic.Pointer[sql.Stmt] // nil until prepared

	// server is what the server said of itself, asked once, when LockTimeout or
	// output needs it.
	serverMu sync.Mutex
	server   atomic.Pointer[mysqlServer]
	// setOutputStmt and storedStmt are prepared with insertStmt, when it is: a stored
	// output (inboxhttp, produced messages) and a duplicate's read then cost one round
	// trip each instead of a prepare, an execute and a close.
	setOutputStmt, storedStmt atomic.Pointer[sql.Stmt]
	// committedStmt is prepared with them: a remembered key's read (Config.RecentKeys).
	committedStmt atomic.Pointer[sql.Stmt]
	// session is what the first claim found the session's isolation level to be
	// (sessionUnknown until then): at READ COMMITTED already, the store's transactions
	// begin without SET TRANSACTION (see beginIsolation).
	session atomic.Int32
}

var _ contract.Store = (*Store)(nil)

type mysqlQueries struct {
	insert, stored, setOutput                   string
	committed                                   string // the stored row, read outside a transaction
	forgetAttempts, forget, purgeAttempts       string
	purge, stats, verify, lockSet, lockRestored string
	insertBounded                               string
	purgeOne, purgeOneAttempt                   string // MySQLVitess
	attempts                                    mysqlAttemptQueries
}

// mysqlTimeFormat is how the store writes and reads its DATETIME(6) columns, in UTC, so
// that neither the session time zone nor the DSN's parseTime and loc matter.
const mysqlTimeFormat = "2006-01-02 15:04:05.999999"

// Error numbers of MySQL and MariaDB the store classifies.
const (
	mysqlDuplicateEntry   = 1062 // ER_DUP_ENTRY
	mysqlLockWaitTimeout  = 1205 // ER_LOCK_WAIT_TIMEOUT
	mysqlDeadlock         = 1213 // ER_LOCK_DEADLOCK
	mysqlLockNowait       = 3572 // ER_LOCK_NOWAIT (MySQL)
	mysqlRollbackOnCommit = 3101 // ER_TRANSACTION_ROLLBACK_DURING_COMMIT: a Group Replication conflict
	mysqlNoSuchTable      = 1146 // ER_NO_SUCH_TABLE
	mysqlBadField         = 1054 // ER_BAD_FIELD_ERROR
	mysqlSerializationSQL = "40001"
)

// New returns a MySQLStore over db, a *sql.DB opened with the "mysql" driver.
// It checks the config but not the database; New verifies the tables.
func New(db SQLDB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("inbox: invalid store config: db is nil: pass a *sql.DB opened with the \"mysql\" driver")
	}
	if cfg.Table == "" {
		cfg.Table = contract.DefaultTable
	}
	if err := sqlstore.ValidateTable(cfg.Table); err != nil {
		return nil, fmt.Errorf("inbox: invalid store config: %w", err)
	}
	if err := cfg.checkEngine(); err != nil {
		return nil, fmt.Errorf("inbox: invalid store config: %w", err)
	}
	switch {
	case cfg.SessionIsolation && cfg.Isolation != sql.LevelDefault:
		return nil, fmt.Errorf("inbox: invalid store config: Isolation is %v and SessionIsolation is set: choose one", cfg.Isolation)
	case cfg.SessionIsolation, cfg.Engine == Vitess:
		// sql.LevelDefault: BeginTx sends no SET TRANSACTION.
	case cfg.Isolation == sql.LevelDefault:
		cfg.Isolation = sql.LevelReadCommitted
	}
	if cfg.LockTimeout < 0 {
		return nil, fmt.Errorf("inbox: invalid store config: LockTimeout is %v: use 0 for no bound, or a positive duration", cfg.LockTimeout)
	}
	t := "`" + cfg.Table + "`"
	a := "`" + cfg.Table + "_attempts`"
	where := " WHERE `consumer` = ? AND `key` = ?"
	// innodb_lock_wait_timeout counts whole seconds, at least 1.
	seconds := int64((cfg.LockTimeout + time.Second - 1) / time.Second)
	s := &Store{db: db, cfg: cfg, sql: mysqlQueries{
		insert: "INSERT INTO " + t + " (`consumer`, `key`, `fingerprint`) VALUES (?, ?, ?)",
		// A locking read sees the latest committed row whatever the isolation level; the
		// duplicate-key check holds a shared lock on it already.
		stored:    "SELECT `fingerprint`, `output` FROM " + t + where + " LOCK IN SHARE MODE",
		setOutput: "UPDATE " + t + " SET `output` = ?" + where,
		// Outside a transaction a plain read sees the latest committed row.
		committed:      "SELECT `fingerprint`, `output` FROM " + t + where,
		attempts:       newMySQLAttemptQueries(cfg.Engine, a),
		forgetAttempts: "DELETE FROM " + a + where,
		forget:         "DELETE FROM " + t + where,
		purgeAttempts:  "DELETE FROM " + a + " WHERE `started_at` < ? ORDER BY `started_at` LIMIT ?",
		purge:          "DELETE FROM " + t + " WHERE `processed_at` < ? ORDER BY `processed_at` LIMIT ?",
		stats:          "SELECT `consumer`, COUNT(*), DATE_FORMAT(MIN(`processed_at`), '%Y-%m-%d %H:%i:%s.%f') FROM " + t + " GROUP BY `consumer` ORDER BY `consumer`",
		verify: "SELECT (SELECT COUNT(*) FROM (SELECT `consumer`, `key`, `processed_at`, `fingerprint`, `output` FROM " + t + " LIMIT 0) i)" +
			" + (SELECT COUNT(*) FROM (SELECT `consumer`, `key`, `attempt`, `started_at` FROM " + a + " LIMIT 0) a)",
		// MariaDB's SET STATEMENT ... FOR does not exist in MySQL, and MySQL's SET_VAR hint
		// refuses innodb_lock_wait_timeout (warning 3637): so a session SET and a restore
		// after the insert. The value in force is saved in a user variable, which the
		// restore clears: a value still saved is one a skipped restore left, and the next
		// claim on that connection restores it instead of saving its own.
		lockSet:      fmt.Sprintf("SET @inbox_lock_wait_timeout = CAST(COALESCE(@inbox_lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout) AS UNSIGNED), SESSION innodb_lock_wait_timeout = %d", seconds),
		lockRestored: "SET SESSION innodb_lock_wait_timeout = COALESCE(@inbox_lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout), @inbox_lock_wait_timeout = NULL",
		// MariaDB's statement-scoped form leaves the session untouched on every path.
		insertBounded: fmt.Sprintf("SET STATEMENT innodb_lock_wait_timeout = %d FOR ", seconds) +
			"INSERT INTO " + t + " (`consumer`, `key`, `fingerprint`) VALUES (?, ?, ?)",
	}}
	s.sql.forEngine(cfg.Engine, t, a)
	return s, nil
}

// inTx runs fn in a short transaction of the store's own, on db, at READ COMMITTED
// (where the engine allows choosing).
func (s *Store) inTx(ctx context.Context, db sqlstore.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: s.known(s.ownIsolation())})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return contract.Join(err, sqlstore.Rollback(tx))
	}
	return tx.Commit()
}

// wrap names what failed and classifies MySQL's and MariaDB's own error numbers.
func (s *Store) wrap(doing string, err error) error {
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		switch {
		case myErr.Number == mysqlDeadlock, myErr.Number == mysqlLockWaitTimeout, myErr.Number == mysqlLockNowait,
			myErr.Number == mysqlRollbackOnCommit, string(myErr.SQLState[:]) == mysqlSerializationSQL,
			myErr.Number == tidbWriteConflict, myErr.Number == tidbRetryable:
			return fmt.Errorf("inbox: %s: %w: %w", doing, contract.ErrContended, err)
		case s.tidbLockRetries(myErr):
			return fmt.Errorf("inbox: %s: %w: TiDB retried the statement as long as it allows (pessimistic-txn.max-retry-count): %w", doing, contract.ErrContended, err)
		case myErr.Number == mysqlNoSuchTable, myErr.Number == mysqlBadField:
			return fmt.Errorf("inbox: %s: %w: table %q or %q is missing or outdated: run schema/mysql.sql, `inbox schema mysql`, or (*MySQLStore).CreateSchema: %w",
				doing, contract.ErrNoTable, s.cfg.Table, s.cfg.Table+"_attempts", err)
		}
	}
	return fmt.Errorf("inbox: %s: %w", doing, err)
}
