package postgresstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// The handles attempt counts go through beside a joined transaction (ADR 7): never the
// connection of a transaction the middleware joins.

// attemptDB returns the handle attempts are counted through, never the connection of a
// transaction the message context carries (the middleware joins it): a statement
// there would run inside that transaction, and a BEGIN ... COMMIT would commit it. Over
// a pool that is a second connection, waited for at most AttemptConnWait; over the
// *pgx.Conn the joined transaction runs on, the count is refused.
func (s *Store) attemptDB(ctx context.Context) (PgxDB, func(), error) {
	joined := contract.TxFromContext(ctx)
	if joined == nil {
		return s.db, func() {}, nil
	}
	switch db := s.db.(type) {
	case *pgxpool.Pool:
		acquireCtx, cancel := context.WithTimeout(ctx, contract.AttemptConnWait)
		defer cancel()
		conn, err := db.Acquire(acquireCtx)
		if err != nil {
			return nil, nil, sqlstore.AttemptConnErr(ctx, err, "the joined transaction", "raise the pool's MaxConns above the number of handlers that run at once")
		}
		return conn, conn.Release, nil
	case *pgx.Conn:
		if tx, ok := joined.(pgx.Tx); ok && tx.Conn() == db {
			return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the joined transaction runs on the store's *pgx.Conn, where counting would commit it; give the store a *pgxpool.Pool, or set MaxAttempts to 0", contract.ErrAttemptsNeedConn)
		}
	}
	return s.db, func() {}, nil
}

// asideDB returns the handle attempts are counted through outside the claim's
// transaction: beside a joined one, attemptDB's; beside one the store began, which
// holds a connection of the pool, a second connection, waited for at most
// AttemptConnWait. (New refuses a store over a single connection that would need it.)
func (s *Store) asideDB(ctx context.Context) (PgxDB, func(), error) {
	if contract.TxFromContext(ctx) != nil {
		return s.attemptDB(ctx)
	}
	if pool, ok := s.db.(*pgxpool.Pool); ok {
		acquireCtx, cancel := context.WithTimeout(ctx, contract.AttemptConnWait)
		defer cancel()
		conn, err := pool.Acquire(acquireCtx)
		if err != nil {
			return nil, nil, sqlstore.AttemptConnErr(ctx, err, "the claim's transaction", "raise the pool's MaxConns above the number of handlers that run at once")
		}
		return conn, conn.Release, nil
	}
	return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the claim's transaction holds the store's only connection", contract.ErrAttemptsNeedConn)
}

// CheckAttempts implements attemptChecker.
func (s *SQLStore) CheckAttempts(ctx context.Context) error {
	a := pgSQLAttempts{s}
	if err := sqlstore.CheckAttempts(s.db, a.CountInTx(), s.cfg.Isolation.String()); err != nil {
		return err
	}
	return s.pooler.attempts(ctx)
}
