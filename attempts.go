package inbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Attempts (Config.MaxAttempts, ADRs 5, 7 and 60). Each delivery's attempt is a row of
// <table>_attempts named by a random token, committed before the claim's transaction
// begins so that it survives a crash, and a session lock named by the same token (an
// advisory lock on PostgreSQL, GET_LOCK on MySQL), taken by the statement that inserts
// the row, so before anyone can see the row, and released only once the row is gone.
// A process that dies takes its sessions, and their locks, with it: a row whose lock is
// free is an attempt that crashed. Only the transaction holding the key counts, and it
// ends its own attempt, row and lock, before it lets the key go.

// newAttemptToken returns a random attempt token: 32 hex digits, a valid lock name on
// every engine (MySQL's are at most 64 characters).
func newAttemptToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// mysqlAttemptLockPrefix starts the GET_LOCK name of an attempt: the names are the
// server's, shared by every table and application.
const mysqlAttemptLockPrefix = "inbox."

// The handles attempt counts go through beside a joined transaction (ADR 7): never the
// connection of a transaction the middleware joins.

// attemptDB returns the handle attempts are counted through, never the connection of a
// transaction the message context carries (the middleware joins it): a statement
// there would run inside that transaction, and a BEGIN ... COMMIT would commit it. Over
// a pool that is a second connection, waited for at most AttemptConnWait; over the
// *pgx.Conn the joined transaction runs on, the count is refused.
func (s *PostgresStore) attemptDB(ctx context.Context) (PgxDB, func(), error) {
	joined := txFromContext(ctx)
	if joined == nil {
		return s.db, func() {}, nil
	}
	switch db := s.db.(type) {
	case *pgxpool.Pool:
		acquireCtx, cancel := context.WithTimeout(ctx, AttemptConnWait)
		defer cancel()
		conn, err := db.Acquire(acquireCtx)
		if err != nil {
			return nil, nil, attemptConnErr(ctx, err, "the joined transaction", "raise the pool's MaxConns above the number of handlers that run at once")
		}
		return conn, conn.Release, nil
	case *pgx.Conn:
		if tx, ok := joined.(pgx.Tx); ok && tx.Conn() == db {
			return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the joined transaction runs on the store's *pgx.Conn, where counting would commit it; give the store a *pgxpool.Pool, or set MaxAttempts to 0", ErrAttemptsNeedConn)
		}
	}
	return s.db, func() {}, nil
}

// attemptConnErr explains a second connection that did not come for an attempt count,
// while holder holds the first.
func attemptConnErr(ctx context.Context, err error, holder, fix string) error {
	if ctx.Err() != nil {
		return fmt.Errorf("inbox: counting the attempt: %w: the message context ended while waiting for a second connection of the pool, whose first %s holds; %s, or set MaxAttempts to 0: %w",
			ErrAttemptsNeedConn, holder, fix, err)
	}
	return fmt.Errorf("inbox: counting the attempt: %w: no second connection of the pool came free within %v while %s holds one; %s, or set MaxAttempts to 0: %w",
		ErrAttemptsNeedConn, AttemptConnWait, holder, fix, err)
}

// asideDB returns the handle attempts are counted through outside the claim's
// transaction: beside a joined one, attemptDB's; beside one the store began, which
// holds a connection of the pool, a second connection, waited for at most
// AttemptConnWait. (New refuses a store over a single connection that would need it.)
func (s *PostgresStore) asideDB(ctx context.Context) (PgxDB, func(), error) {
	if txFromContext(ctx) != nil {
		return s.attemptDB(ctx)
	}
	if pool, ok := s.db.(*pgxpool.Pool); ok {
		acquireCtx, cancel := context.WithTimeout(ctx, AttemptConnWait)
		defer cancel()
		conn, err := pool.Acquire(acquireCtx)
		if err != nil {
			return nil, nil, attemptConnErr(ctx, err, "the claim's transaction", "raise the pool's MaxConns above the number of handlers that run at once")
		}
		return conn, conn.Release, nil
	}
	return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the claim's transaction holds the store's only connection", ErrAttemptsNeedConn)
}

// asideSQL is asideDB for the database/sql stores.
func asideSQL(ctx context.Context, db SQLDB) (SQLDB, func(), error) {
	if txFromContext(ctx) != nil {
		return attemptDB(ctx, db)
	}
	if pool, ok := db.(*sql.DB); ok {
		acquireCtx, cancel := context.WithTimeout(ctx, AttemptConnWait)
		defer cancel()
		conn, err := pool.Conn(acquireCtx)
		if err != nil {
			return nil, nil, attemptConnErr(ctx, err, "the claim's transaction", "raise SetMaxOpenConns above the number of handlers that run at once")
		}
		return conn, func() { _ = conn.Close() }, nil
	}
	return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the claim's transaction holds the store's only connection", ErrAttemptsNeedConn)
}

// attemptDB returns the handle a database/sql store counts attempts through, never the
// connection of a transaction the message context carries (the middleware joins it): a
// statement there would run inside that transaction. Over a *sql.DB that is a second
// connection, waited for at most AttemptConnWait; over a *sql.Conn, which the joined
// transaction may be running on (database/sql cannot tell), the count is refused.
func attemptDB(ctx context.Context, db SQLDB) (SQLDB, func(), error) {
	if txFromContext(ctx) == nil {
		return db, func() {}, nil
	}
	switch db := db.(type) {
	case *sql.DB:
		acquireCtx, cancel := context.WithTimeout(ctx, AttemptConnWait)
		defer cancel()
		conn, err := db.Conn(acquireCtx)
		if err != nil {
			return nil, nil, attemptConnErr(ctx, err, "the joined transaction", "raise SetMaxOpenConns above the number of handlers that run at once")
		}
		return conn, func() { _ = conn.Close() }, nil
	case *sql.Conn:
		return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the store's handle is a *sql.Conn, which the joined transaction may be running on; give the store the *sql.DB, or set MaxAttempts to 0", ErrAttemptsNeedConn)
	}
	return db, func() {}, nil
}

// checkAttemptsSQL is checkAttempts of a database/sql store over db whose own claims
// count in their transaction when inTx: otherwise the count needs a second connection,
// which a *sql.Conn does not have.
func checkAttemptsSQL(db SQLDB, inTx bool, level string) error {
	if _, conn := db.(*sql.Conn); conn && !inTx {
		return fmt.Errorf("MaxAttempts over a *sql.Conn needs the store's transactions at READ COMMITTED, not %s: there the claim's snapshot predates its wait (or its reads lock), and the count of dead attempts must run on a second connection; give the store the *sql.DB, or use READ COMMITTED", level)
	}
	return nil
}

// checkAttempts implements attemptChecker.
func (s *SQLPostgresStore) checkAttempts(ctx context.Context) error {
	a := pgSQLAttempts{s}
	if err := checkAttemptsSQL(s.db, a.countInTx(), s.cfg.Isolation.String()); err != nil {
		return err
	}
	return s.pooler.attempts(ctx)
}

// checkAttempts implements attemptChecker.
func (s *MySQLStore) checkAttempts(context.Context) error {
	a := mysqlAttempts{s}
	return checkAttemptsSQL(s.db, a.countInTx(), s.cfg.Isolation.String())
}
