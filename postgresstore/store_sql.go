package postgresstore

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// SQLDB is what a database/sql store needs of a database. *sql.DB satisfies it, and so
// does *sql.Conn (which serves one message at a time). It is inbox.SQLDB.
type SQLDB = sqlstore.DB

// SQLConfig configures a SQLPostgresStore.
type SQLConfig struct {
	// Table is the inbox table; the store also uses <Table>_attempts. Create both with
	// schema/postgres.sql or CreateSchema. Defaults to "inbox".
	Table string

	// Isolation is the isolation level of the transactions the store begins. At READ
	// COMMITTED a concurrent duplicate waits and then gets its verdict; at REPEATABLE READ
	// or SERIALIZABLE it fails with a serialization error instead (returned as
	// ErrContended, so the message comes again). Defaults to sql.LevelDefault, which the
	// store takes as READ COMMITTED.
	Isolation sql.IsolationLevel

	// LockTimeout bounds how long a claim waits on a concurrent duplicate's transaction
	// (lock_timeout, set for the inbox statement only: the value in force before, the
	// session's or a joined transaction's, is restored after it). When it expires the
	// claim fails with ErrContended. Defaults to 0: wait as long as the server's lock_timeout allows
	// (by default, until the other ends).
	LockTimeout time.Duration

	// Schema is the PostgreSQL schema of Table and <Table>_attempts, as
	// PostgresConfig.Schema. Defaults to "": the search_path finds them.
	Schema string

	// SearchPath puts Schema first in the search_path of the transactions the store
	// begins, for the transaction only, as PostgresConfig.SearchPath (one more
	// statement per claim). Requires Schema. Defaults to false.
	SearchPath bool
}

// SQLStore is the inbox's store on PostgreSQL through database/sql (inbox.SQLPostgresStore), for services that use
// pgx's stdlib driver (github.com/jackc/pgx/v5/stdlib) with sqlx, sqlc, GORM, ent or bun.
// It uses the same tables as Store. Handlers get a *sql.Tx from TxFromContext.
//
// Your methods: CreateSchema (or run schema/postgres.sql), Forget, Stats, UnfinishedAttempts
// and NeighbourConsumers; purge with inbox.Purge or inbox.PurgeEvery. The others (Claim,
// ClaimIn, PurgeBatch, Verify and the attempt methods) are the rest of Store, the
// contract between the inbox and its stores: the inbox calls them, not you.
//
// When the message context ends, the handler's next statement fails and the middleware
// rolls back (the store begins its transactions with the context's cancellation cut
// off, so that database/sql does not close the connection under it).
type SQLStore struct {
	db  sqlstore.DB
	cfg SQLConfig
	sql postgresQueries
	// batchSQL claims batches (BatchStore), offsetSQL offsets (OffsetStore).
	batchSQL  postgresBatchQueries
	offsetSQL postgresOffsetQueries
	// pooler tells whether db goes through a pooler that moves transactions, where
	// attempts cannot be counted (ErrAttemptsBehindPooler).
	pooler *poolerCheck
}

var _ contract.Store = (*SQLStore)(nil)

// NewSQL returns a SQLPostgresStore over db, a *sql.DB opened with pgx's
// stdlib driver. It checks the config but not the database; New verifies the tables.
func NewSQL(db SQLDB, cfg SQLConfig) (*SQLStore, error) {
	if db == nil {
		return nil, errors.New("inbox: invalid store config: db is nil: pass a *sql.DB opened with the \"pgx\" driver")
	}
	if cfg.Table == "" {
		cfg.Table = contract.DefaultTable
	}
	if err := errors.Join(sqlstore.ValidateTable(cfg.Table), validateSchema(cfg.Schema, cfg.SearchPath)); err != nil {
		return nil, fmt.Errorf("inbox: invalid store config: %w", err)
	}
	if cfg.Isolation == sql.LevelDefault {
		cfg.Isolation = sql.LevelReadCommitted
	}
	if cfg.LockTimeout < 0 {
		return nil, fmt.Errorf("inbox: invalid store config: LockTimeout is %v: use 0 for no bound, or a positive duration", cfg.LockTimeout)
	}
	return &SQLStore{db: db, cfg: cfg, sql: newPostgresQueries(cfg.Schema, cfg.Table, cfg.SearchPath),
		batchSQL: newPostgresBatchQueries(cfg.Schema, cfg.Table), offsetSQL: newPostgresOffsetQueries(cfg.Schema, cfg.Table),
		pooler: &poolerCheck{probe: sqlMovesTransactions(db)}}, nil
}

// wrap names what failed and classifies PostgreSQL's own error codes.
func (s *SQLStore) wrap(doing string, err error) error {
	return wrapPostgres(doing, s.sql.table, "(*SQLPostgresStore).CreateSchema", err)
}
