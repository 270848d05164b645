package postgresstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

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

// SQLStore is a Store on PostgreSQL through database/sql, for services that use
// pgx's stdlib driver (github.com/jackc/pgx/v5/stdlib) with sqlx, sqlc, GORM, ent or bun.
// It uses the same tables as PostgresStore. Handlers get a *sql.Tx from TxFromContext.
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

// CreateSchema creates the store's tables and index if they do not exist, with the DDL of
// schema/postgres.sql, for users who do not run a migration tool.
func (s *SQLStore) CreateSchema(ctx context.Context) error {
	ddl, err := postgresDDL(s.cfg.Schema, s.cfg.Table)
	if err != nil {
		return err
	}
	if err := sqlstore.DropOldAttempts(pgName(s.cfg.Schema, s.cfg.Table+"_attempts"), func(q string) error {
		_, err := s.db.ExecContext(ctx, q)
		return err
	}); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("inbox: creating the schema: %w", err)
	}
	return nil
}

// Claim implements Store, for the inbox (not for you).
func (s *SQLStore) Claim(ctx context.Context, rec contract.Record) (contract.Claim, error) {
	if rec.Attempt != "" {
		if err := s.pooler.claim(ctx); err != nil {
			return contract.Claim{}, err
		}
	}
	return sqlstore.ClaimInNewTx(ctx, s.db, s.cfg.Isolation, s.wrap, rec, pgSQLAttempts{s}, func(tx *sql.Tx) (contract.Claim, error) {
		return s.claim(ctx, tx, rec, false)
	})
}

// ClaimIn implements Store, for the inbox (not for you); tx must be a *sql.Tx.
func (s *SQLStore) ClaimIn(ctx context.Context, tx any, rec contract.Record) (contract.Claim, error) {
	sqlTx, err := sqlstore.JoinedTx(tx, "SQLPostgresStore")
	if err != nil {
		return contract.Claim{}, err
	}
	if rec.Attempt != "" {
		if err := s.pooler.claim(ctx); err != nil {
			return contract.Claim{}, err
		}
	}
	return sqlstore.ClaimJoined(ctx, s.db, sqlTx, rec, pgSQLAttempts{s}, s.wrap, func(tx *sql.Tx) (contract.Claim, error) {
		return s.claim(ctx, tx, rec, true)
	})
}

// claim inserts the key and, only when it was there already, reads what the first
// delivery stored: at READ COMMITTED that read takes a new snapshot after the insert's
// wait, so it sees the row of the transaction that made it wait.
func (s *SQLStore) claim(ctx context.Context, tx *sql.Tx, rec contract.Record, joined bool) (contract.Claim, error) {
	if s.sql.searchPath != "" && !joined {
		if _, err := tx.ExecContext(ctx, s.sql.searchPath); err != nil {
			return contract.Claim{}, s.wrap("setting the search_path", err)
		}
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := tx.ExecContext(ctx, s.sql.lockSet, fmt.Sprintf("%dms", lockTimeoutMillis(s.cfg.LockTimeout))); err != nil {
			return contract.Claim{}, s.wrap("setting the lock timeout", err)
		}
	}
	res, err := tx.ExecContext(ctx, s.sql.insert, rec.Consumer, rec.Key, rec.Fingerprint)
	if err != nil {
		return contract.Claim{}, s.wrap("inserting the key", err)
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := tx.ExecContext(ctx, s.sql.lockReset); err != nil {
			return contract.Claim{}, s.wrap("resetting the lock timeout", err)
		}
	}
	n, err := res.RowsAffected()
	if err != nil {
		return contract.Claim{}, s.wrap("inserting the key", err)
	}
	if n == 1 {
		return contract.Claim{Tx: &sqlstore.Tx{SQL: tx, Joined: joined, Wrap: s.wrap,
			SetOutput: func(ctx context.Context, tx *sql.Tx, output []byte) error {
				_, err := tx.ExecContext(ctx, s.sql.setOutput, rec.Consumer, rec.Key, output)
				return err
			}}}, nil
	}
	return sqlstore.ReadStored(ctx, tx, s.sql.stored, rec, s.wrap)
}

// Forget implements Store.
func (s *SQLStore) Forget(ctx context.Context, consumer, key string) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.sql.forget, consumer, contract.StorableKey(key))
	if err != nil {
		return false, s.wrap("forgetting the key", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, s.wrap("forgetting the key", err)
	}
	return n > 0, nil
}

// PurgeBatch implements Store, for inbox.Purge and inbox.PurgeEvery: call those.
func (s *SQLStore) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	var n contract.Purged
	if err := s.db.QueryRowContext(ctx, s.sql.purge, before, limit).Scan(&n.Keys, &n.Attempts); err != nil {
		return contract.Purged{}, s.wrap("purging", err)
	}
	return n, nil
}

// Stats implements Store.
func (s *SQLStore) Stats(ctx context.Context) ([]contract.ConsumerStats, error) {
	rows, err := s.db.QueryContext(ctx, s.sql.stats)
	if err != nil {
		return nil, s.wrap("reading stats", err)
	}
	defer rows.Close()
	var stats []contract.ConsumerStats
	for rows.Next() {
		var c contract.ConsumerStats
		if err := rows.Scan(&c.Consumer, &c.Keys, &c.Oldest); err != nil {
			return nil, s.wrap("reading stats", err)
		}
		stats = append(stats, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("reading stats", err)
	}
	return stats, nil
}

// Verify implements Store, for the inbox (not for you). It also fails, with
// ErrStatementCache, when the driver uses pgx's statement cache through a pooler in
// transaction mode (PgBouncer), where it cannot work.
func (s *SQLStore) Verify(ctx context.Context) error {
	cached, err := sqlStatementCache(ctx, s.db)
	if err == nil {
		err = s.pooler.statementCache(ctx, cached)
	}
	if err != nil {
		return err
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.sql.verify).Scan(&n); err != nil {
		return s.wrap("checking the tables", err)
	}
	return nil
}

// wrap names what failed and classifies PostgreSQL's own error codes.
func (s *SQLStore) wrap(doing string, err error) error {
	return wrapPostgres(doing, s.sql.table, "(*SQLPostgresStore).CreateSchema", err)
}

// ReadStored implements storedReader: the row a committed key's first delivery stored,
// read outside any transaction (pgx's driver caches the statement: one round trip).
func (s *SQLStore) ReadStored(ctx context.Context, rec contract.Record) (contract.Claim, bool, error) {
	claim := contract.Claim{Duplicate: true}
	err := s.db.QueryRowContext(ctx, s.sql.stored, rec.Consumer, rec.Key).Scan(&claim.Fingerprint, &claim.Output)
	if errors.Is(err, sql.ErrNoRows) {
		return contract.Claim{}, false, nil
	}
	if err != nil {
		return contract.Claim{}, false, s.wrap("reading the stored key", err)
	}
	return claim, true, nil
}
