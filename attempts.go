package inbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The handles attempt counts go through (Config.MaxAttempts, ADR 7): never the
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
			return nil, nil, attemptConnErr(ctx, err, "raise the pool's MaxConns above the number of handlers that run at once")
		}
		return conn, conn.Release, nil
	case *pgx.Conn:
		if tx, ok := joined.(pgx.Tx); ok && tx.Conn() == db {
			return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the joined transaction runs on the store's *pgx.Conn, where counting would commit it; give the store a *pgxpool.Pool, or set MaxAttempts to 0", ErrAttemptsNeedConn)
		}
	}
	return s.db, func() {}, nil
}

// attemptConnErr explains a second connection that did not come for an attempt count.
func attemptConnErr(ctx context.Context, err error, fix string) error {
	if ctx.Err() != nil {
		return fmt.Errorf("inbox: counting the attempt: %w: the message context ended while waiting for a second connection of the pool, whose first the joined transaction holds; %s, or set MaxAttempts to 0: %w",
			ErrAttemptsNeedConn, fix, err)
	}
	return fmt.Errorf("inbox: counting the attempt: %w: no second connection of the pool came free within %v while the joined transaction holds one; %s, or set MaxAttempts to 0: %w",
		ErrAttemptsNeedConn, AttemptConnWait, fix, err)
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
			return nil, nil, attemptConnErr(ctx, err, "raise SetMaxOpenConns above the number of handlers that run at once")
		}
		return conn, func() { _ = conn.Close() }, nil
	case *sql.Conn:
		return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the store's handle is a *sql.Conn, which the joined transaction may be running on; give the store the *sql.DB, or set MaxAttempts to 0", ErrAttemptsNeedConn)
	}
	return db, func() {}, nil
}

// bridgeAttempts runs claim under the Store contract where Claim starts the attempt,
// with the counting the SQL stores had before it: a count read at the start, before the
// claim waits on the key. It starts the attempt before the claim, reports the count in
// Claim.Unfinished, ends a duplicate's attempt, and returns a Tx whose Rollback ends the
// attempt and whose Abandon does not.
func bridgeAttempts(ctx context.Context, rec Record,
	start func(ctx context.Context, consumer, key string) (int, error),
	end func(ctx context.Context, consumer, key string) error,
	claim func() (Claim, error)) (Claim, error) {
	unfinished := 0
	if rec.Attempt != "" {
		n, err := start(ctx, rec.Consumer, rec.Key)
		if err != nil {
			return Claim{}, err
		}
		unfinished = n
	}
	endIt := func(ctx context.Context) error {
		if rec.Attempt == "" {
			return nil
		}
		return end(context.WithoutCancel(ctx), rec.Consumer, rec.Key)
	}
	c, err := claim()
	switch {
	case err != nil:
		return c, err
	case c.Duplicate:
		return c, endIt(ctx)
	}
	c.Unfinished = unfinished
	c.Tx = &bridgedTx{Tx: c.Tx, end: endIt}
	return c, nil
}

// bridgedTx is a SQL store's Tx whose Rollback also ends the claim's attempt.
type bridgedTx struct {
	Tx
	end func(context.Context) error
}

func (t *bridgedTx) Rollback(ctx context.Context) error { return join(t.Tx.Rollback(ctx), t.end(ctx)) }

func (t *bridgedTx) Abandon(ctx context.Context) error { return t.Tx.Rollback(ctx) }
