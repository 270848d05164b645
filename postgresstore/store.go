package postgresstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// PgxDB is what PostgresStore needs of a database. *pgxpool.Pool satisfies it, and so
// does *pgx.Conn (which serves one message at a time).
type PgxDB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config configures a PostgresStore.
type Config struct {
	// Table is the inbox table; the store also uses <Table>_attempts. Create both with
	// schema/postgres.sql or CreateSchema. Defaults to "inbox".
	Table string

	// TxOptions are the options of the transactions the store begins. An empty IsoLevel
	// means READ COMMITTED, where a concurrent duplicate waits and then gets its verdict;
	// at REPEATABLE READ or SERIALIZABLE it fails with a serialization error instead
	// (returned as ErrContended, so the message comes again). Defaults to READ COMMITTED.
	TxOptions pgx.TxOptions

	// LockTimeout bounds how long a claim waits on a concurrent duplicate's transaction
	// (lock_timeout, set for the inbox statement only: the value in force before, the
	// session's or a joined transaction's, is restored after it). When it expires the
	// claim fails with ErrContended and the connection goes back to the pool. Defaults to 0: wait as
	// long as the server's lock_timeout allows (by default, until the other ends).
	LockTimeout time.Duration

	// Schema is the PostgreSQL schema of Table and <Table>_attempts: every statement of
	// the store names them with it, whatever the session's search_path; CreateSchema
	// creates the schema too. With a schema per tenant on one server, give each tenant's
	// store its schema (see TenantStore). Defaults to "": the search_path finds them.
	Schema string

	// SearchPath puts Schema first in the search_path of the transactions the store
	// begins, set for the transaction only (set_config(..., true)), before the
	// session's own path: the handler's unqualified table names then resolve in
	// Schema first, and the session's search_path is back as it was when the
	// transaction ends. A transaction the inbox joins keeps the search_path its owner
	// gave it. Requires Schema. Defaults to false: the handler's statements resolve
	// through the session's search_path.
	SearchPath bool
}

// Store is the inbox's store on PostgreSQL through pgx (inbox.PostgresStore). Handlers
// get a pgx.Tx from inbox.TxFromContext.
//
// Your methods: CreateSchema (or run schema/postgres.sql), Forget, Stats, UnfinishedAttempts
// and NeighbourConsumers; purge with inbox.Purge or inbox.PurgeEvery. The others (Claim,
// ClaimIn, PurgeBatch, Verify and the attempt methods) are the rest of Store, the
// contract between the inbox and its stores: the inbox calls them, not you.
// A pgx transaction does not roll back when its context is cancelled:
// the middleware rolls back itself, with a context that cannot be cancelled. Over a
// single *pgx.Conn, note pgx's own rule: it closes the connection when a BEGIN or a
// COMMIT fails because the context ended as it was sent, or when a statement is
// cancelled midway. The store and the middleware never start one on a context that has
// ended, but at that instant the connection is lost (nothing is applied twice: the
// message comes again) and the application must connect again; a pool does that itself.
//
// Over a *pgxpool.Pool or a *pgx.Conn, at READ COMMITTED, a claim costs one round trip:
// the key's INSERT travels with the BEGIN, in one simple-protocol query, with the key
// quoted into the SQL text (only when the server has standard_conforming_strings on and
// the client encoding is UTF8, which makes doubling single quotes a complete quoting; a
// key that is not valid UTF-8 or holds a NUL never gets there). A duplicate fails that
// query with unique_violation; the rollback and the read of what the first delivery
// stored then share a second round trip. Joined transactions, other PgxDB values and
// other isolation levels use two round trips: BEGIN, then a pipelined INSERT ... ON
// CONFLICT DO NOTHING and read.
type Store struct {
	db  PgxDB
	cfg Config
	sql postgresQueries
	// batchSQL claims batches (BatchStore), offsetSQL offsets (OffsetStore).
	batchSQL  postgresBatchQueries
	offsetSQL postgresOffsetQueries
	// folded claims in one round trip; nil when db or the config does not allow it.
	folded *foldedClaim
	// pin returns a connection of db and the func that gives it back, for the claims
	// that must run on a connection of their own choosing (attempts); nil when db is
	// not a *pgxpool.Pool, a *pgx.Conn or a *pgxpool.Conn.
	pin func(ctx context.Context) (*pgx.Conn, func(), error)
	// countInTx: the claim's transaction counts the key's dead attempts itself, which
	// needs READ COMMITTED's fresh snapshot per statement (see countAside).
	countInTx bool
	// pooler tells whether db goes through a pooler that moves transactions, where
	// attempts cannot be counted (ErrAttemptsBehindPooler).
	pooler *poolerCheck
}

var _ contract.Store = (*Store)(nil)

type postgresQueries struct {
	insert, stored, setOutput                        string
	forget, purge, stats, verify, lockSet, lockReset string
	attempts                                         pgAttemptQueries
	// searchPath puts the schema first in the search_path of a transaction the store
	// began; empty without PostgresConfig.SearchPath.
	searchPath string
	// table names the inbox table in errors, with its schema.
	table string
}

// New returns a PostgresStore over db. It checks the config but not the
// database; New verifies the tables.
func New(db PgxDB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("inbox: invalid store config: db is nil: pass a *pgxpool.Pool")
	}
	if cfg.Table == "" {
		cfg.Table = contract.DefaultTable
	}
	if err := errors.Join(sqlstore.ValidateTable(cfg.Table), validateSchema(cfg.Schema, cfg.SearchPath)); err != nil {
		return nil, fmt.Errorf("inbox: invalid store config: %w", err)
	}
	if cfg.TxOptions.IsoLevel == "" {
		cfg.TxOptions.IsoLevel = pgx.ReadCommitted
	}
	if cfg.LockTimeout < 0 {
		return nil, fmt.Errorf("inbox: invalid store config: LockTimeout is %v: use 0 for no bound, or a positive duration", cfg.LockTimeout)
	}
	s := &Store{db: db, cfg: cfg, sql: newPostgresQueries(cfg.Schema, cfg.Table, cfg.SearchPath), pin: pinPgx(db),
		countInTx: cfg.TxOptions.IsoLevel == pgx.ReadCommitted,
		batchSQL:  newPostgresBatchQueries(cfg.Schema, cfg.Table), offsetSQL: newPostgresOffsetQueries(cfg.Schema, cfg.Table),
		pooler: &poolerCheck{probe: pgxMovesTransactions(db)}}
	if s.pin != nil && cfg.TxOptions.IsoLevel == pgx.ReadCommitted && cfg.TxOptions.BeginQuery == "" {
		s.folded = newFoldedClaim(s)
	}
	return s, nil
}

// savedLockTimeout is the placeholder setting that keeps the lock_timeout in force
// before a claim with PostgresConfig.LockTimeout; restoreLockTimeout puts it back, for
// the rest of the transaction.
const (
	savedLockTimeout   = "inbox.lock_timeout"
	restoreLockTimeout = `SELECT set_config('lock_timeout', current_setting('` + savedLockTimeout + `'), true)`
)

// newPostgresQueries returns the statements of the PostgreSQL stores (pgx and
// database/sql) on table and <table>_attempts, in schema when it is not empty.
func newPostgresQueries(schema, table string, searchPath bool) postgresQueries {
	t := pgName(schema, table)
	a := pgName(schema, table+"_attempts")
	q := postgresQueries{
		table:     t,
		insert:    `INSERT INTO ` + t + ` (consumer, key, fingerprint) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		stored:    `SELECT fingerprint, output FROM ` + t + ` WHERE consumer = $1 AND key = $2`,
		setOutput: `UPDATE ` + t + ` SET output = $3 WHERE consumer = $1 AND key = $2`,
		attempts:  newPgAttemptQueries(a),
		forget:    `WITH a AS (DELETE FROM ` + a + ` WHERE consumer = $1 AND key = $2) DELETE FROM ` + t + ` WHERE consumer = $1 AND key = $2`,
		purge: `WITH a AS (DELETE FROM ` + a + ` WHERE ctid IN (SELECT ctid FROM ` + a + ` WHERE started_at < $1 LIMIT $2) RETURNING 1),
			k AS (DELETE FROM ` + t + ` WHERE ctid IN (SELECT ctid FROM ` + t + ` WHERE processed_at < $1 LIMIT $2) RETURNING 1)
			SELECT (SELECT count(*) FROM k), (SELECT count(*) FROM a)`,
		stats:  `SELECT consumer, count(*), min(processed_at) FROM ` + t + ` GROUP BY consumer ORDER BY consumer`,
		verify: `SELECT (SELECT count(*) FROM (SELECT consumer, key, processed_at, fingerprint, output FROM ` + t + ` LIMIT 0) t) + (SELECT count(*) FROM (SELECT consumer, key, attempt, started_at FROM ` + a + ` LIMIT 0) a)`,
		// The value in force before the claim (the session's, or the joined transaction's
		// SET LOCAL) is saved in a placeholder setting and put back after the insert. The
		// subquery runs first: a FROM item with a volatile target list is not pulled up.
		lockSet:   `SELECT set_config('lock_timeout', $1, true) FROM (SELECT set_config('` + savedLockTimeout + `', current_setting('lock_timeout'), true)) saved`,
		lockReset: restoreLockTimeout,
	}
	if searchPath {
		q.searchPath = searchPathSQL(schema)
	}
	return q
}

// lockTimeoutMillis returns d in whole milliseconds for lock_timeout, rounded up: a
// sub-millisecond timeout must not become 0, which means no timeout.
func lockTimeoutMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// wrap names what failed and classifies PostgreSQL's own error codes.
func (s *Store) wrap(doing string, err error) error {
	return wrapPostgres(doing, s.sql.table, "(*PostgresStore).CreateSchema", err)
}

// wrapPostgres names what failed and classifies PostgreSQL's own error codes, for both
// PostgreSQL stores (pgconn.PgError comes through pgx's stdlib driver too).
func wrapPostgres(doing, table, createSchema string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if statementCacheErr(pgErr) {
			return fmt.Errorf("inbox: %s: %w: %s: %w", doing, contract.ErrStatementCache, statementCacheFix, err)
		}
		switch pgErr.Code {
		case "40001", "40P01", "55P03": // serialization_failure, deadlock_detected, lock_not_available
			return fmt.Errorf("inbox: %s: %w: %w", doing, contract.ErrContended, err)
		case "42P01", "42703": // undefined_table, undefined_column
			return fmt.Errorf("inbox: %s: %w: table %s or its _attempts table is missing or outdated: run schema/postgres.sql, `inbox schema postgres`, or %s: %w",
				doing, contract.ErrNoTable, table, createSchema, err)
		}
	}
	return fmt.Errorf("inbox: %s: %w", doing, err)
}
