package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// CountByConsumer runs a query of (consumer, count) rows on db.
func CountByConsumer(ctx context.Context, db DB, query string) (map[string]int64, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var consumer string
		var n int64
		if err := rows.Scan(&consumer, &n); err != nil {
			return nil, err
		}
		out[consumer] = n
	}
	return out, rows.Err()
}

// AttemptConnErr explains a second connection that did not come for an attempt count,
// while holder holds the first.
func AttemptConnErr(ctx context.Context, err error, holder, fix string) error {
	if ctx.Err() != nil {
		return fmt.Errorf("inbox: counting the attempt: %w: the message context ended while waiting for a second connection of the pool, whose first %s holds; %s, or set MaxAttempts to 0: %w",
			contract.ErrAttemptsNeedConn, holder, fix, err)
	}
	return fmt.Errorf("inbox: counting the attempt: %w: no second connection of the pool came free within %v while %s holds one; %s, or set MaxAttempts to 0: %w",
		contract.ErrAttemptsNeedConn, contract.AttemptConnWait, holder, fix, err)
}

// AsideDB is asideDB for the database/sql stores.
func AsideDB(ctx context.Context, db DB) (DB, func(), error) {
	if contract.TxFromContext(ctx) != nil {
		return AttemptDB(ctx, db)
	}
	if pool, ok := db.(*sql.DB); ok {
		acquireCtx, cancel := context.WithTimeout(ctx, contract.AttemptConnWait)
		defer cancel()
		conn, err := pool.Conn(acquireCtx)
		if err != nil {
			return nil, nil, AttemptConnErr(ctx, err, "the claim's transaction", "raise SetMaxOpenConns above the number of handlers that run at once")
		}
		return conn, func() { _ = conn.Close() }, nil
	}
	return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the claim's transaction holds the store's only connection", contract.ErrAttemptsNeedConn)
}

// AttemptDB returns the handle a database/sql store counts attempts through, never the
// connection of a transaction the message context carries (the middleware joins it): a
// statement there would run inside that transaction. Over a *sql.DB that is a second
// connection, waited for at most AttemptConnWait; over a *sql.Conn, which the joined
// transaction may be running on (database/sql cannot tell), the count is refused.
func AttemptDB(ctx context.Context, db DB) (DB, func(), error) {
	if contract.TxFromContext(ctx) == nil {
		return db, func() {}, nil
	}
	switch db := db.(type) {
	case *sql.DB:
		acquireCtx, cancel := context.WithTimeout(ctx, contract.AttemptConnWait)
		defer cancel()
		conn, err := db.Conn(acquireCtx)
		if err != nil {
			return nil, nil, AttemptConnErr(ctx, err, "the joined transaction", "raise SetMaxOpenConns above the number of handlers that run at once")
		}
		return conn, func() { _ = conn.Close() }, nil
	case *sql.Conn:
		return nil, nil, fmt.Errorf("inbox: counting the attempt: %w: the store's handle is a *sql.Conn, which the joined transaction may be running on; give the store the *sql.DB, or set MaxAttempts to 0", contract.ErrAttemptsNeedConn)
	}
	return db, func() {}, nil
}

// CheckAttempts is checkAttempts of a database/sql store over db whose own claims
// count in their transaction when inTx: otherwise the count needs a second connection,
// which a *sql.Conn does not have.
func CheckAttempts(db DB, inTx bool, level string) error {
	if _, conn := db.(*sql.Conn); conn && !inTx {
		return fmt.Errorf("MaxAttempts over a *sql.Conn needs the store's transactions at READ COMMITTED, not %s: there the claim's snapshot predates its wait (or its reads lock), and the count of dead attempts must run on a second connection; give the store the *sql.DB, or use READ COMMITTED", level)
	}
	return nil
}

// QueryStrings returns the one text column of query's rows.
func QueryStrings(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
