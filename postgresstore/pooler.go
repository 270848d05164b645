package postgresstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// statementCacheFix says what to change, in the errors wrapping ErrStatementCache.
const statementCacheFix = "a pooler in transaction mode (PgBouncer) runs each transaction on any server connection," +
	" where the statements pgx prepared are missing (SQLSTATE 26000) or were prepared by another client (42P05):" +
	" add default_query_exec_mode=exec to the DSN (or cache_describe, or simple_protocol; or set" +
	" ConnConfig.DefaultQueryExecMode), or connect to PostgreSQL directly"

// statementCacheErr reports whether pgErr is a failure of pgx's statement cache on a
// server connection other than the one it prepared on: the inbox prepares no statement
// of its own, and pgx names those of its cache "stmtcache_<hash>".
func statementCacheErr(pgErr *pgconn.PgError) bool {
	switch pgErr.Code {
	case "42P05", "26000": // duplicate_prepared_statement, invalid_sql_statement_name
		return strings.Contains(pgErr.Message, "stmtcache_")
	}
	return false
}

// pgxStatementCache reports whether db uses pgx's statement cache, which a pooler that
// moves transactions breaks.
func pgxStatementCache(db PgxDB) bool {
	var conn *pgx.ConnConfig
	switch db := db.(type) {
	case *pgxpool.Pool:
		conn = db.Config().ConnConfig
	case *pgx.Conn:
		conn = db.Config()
	case *pgxpool.Conn:
		conn = db.Conn().Config()
	default:
		return false
	}
	return conn.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
}

// sqlStatementCache is pgxStatementCache for a *sql.DB or *sql.Conn: true on pgx's stdlib
// driver in its statement cache mode. A *sql.DB lends one of its connections to be
// asked.
func sqlStatementCache(ctx context.Context, db sqlstore.DB) (bool, error) {
	conn, ok := db.(*sql.Conn)
	if pool, isPool := db.(*sql.DB); isPool {
		c, err := pool.Conn(ctx)
		if err != nil {
			return false, probeFailed(fmt.Errorf("taking a connection of the pool: %w", err))
		}
		defer c.Close()
		conn, ok = c, true
	}
	if !ok {
		return false, nil
	}
	cached := false
	err := conn.Raw(func(dc any) error {
		if pc, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
			cached = pc.Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
		}
		return nil
	})
	return cached, err
}

// movesTransactions finds out, with simple-protocol queries only (which prepare
// nothing), whether a's transactions can run on server connections other than its own.
// Without a pooler, the server's backend pid is the one the connection was given at
// startup; a pooler gives the client its own. Then, while b holds a server connection in
// a transaction, a's next query runs on another server connection than its previous one,
// or b got a's: either shows a pool that moves transactions. In session mode a keeps its
// server connection, and the answer is false. Other clients of a busy pooler can take
// a's server connection and give it back in between, so that one round misses the move:
// probeRounds rounds are tried before the answer is false.
func movesTransactions(ctx context.Context, a, b *pgconn.PgConn) (bool, error) {
	for range probeRounds {
		moves, direct, err := probeRound(ctx, a, b)
		if err != nil || moves || direct {
			return moves, err
		}
	}
	return false, nil
}

// probeRounds is how many rounds movesTransactions tries behind a pooler that did not
// move a's transactions yet.
const probeRounds = 8

// probeRound is one round of movesTransactions; direct reports a connection to
// PostgreSQL itself, which no further round can change.
func probeRound(ctx context.Context, a, b *pgconn.PgConn) (moves, direct bool, err error) {
	first, err := backendPID(ctx, a, "SELECT pg_backend_pid()", 0)
	if err != nil || first == a.PID() {
		return false, err == nil, err
	}
	if a.TxStatus() != 'I' { // a pooler; inside a transaction a keeps its server connection: the mode cannot be told
		return true, false, nil
	}
	held, err := backendPID(ctx, b, "BEGIN; SELECT pg_backend_pid()", 1)
	if err != nil {
		return false, false, err
	}
	defer func() { _, _ = b.Exec(context.WithoutCancel(ctx), "ROLLBACK").ReadAll() }() // b's probe transaction
	next, err := backendPID(ctx, a, "SELECT pg_backend_pid()", 0)
	if err != nil {
		return false, false, err
	}
	return held == first || next != first, false, nil
}

// backendPID runs query, a simple-protocol query, and reads the pid its result number i
// returns.
func backendPID(ctx context.Context, conn *pgconn.PgConn, query string, i int) (uint32, error) {
	results, err := conn.Exec(ctx, query).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", query, err)
	}
	if len(results) <= i || len(results[i].Rows) != 1 || len(results[i].Rows[0]) != 1 {
		return 0, fmt.Errorf("%s: no pid in the result", query)
	}
	pid, err := strconv.ParseUint(string(results[i].Rows[0][0]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", query, err)
	}
	return uint32(pid), nil
}

// attemptsPoolerFix says what to change, in the errors wrapping ErrAttemptsBehindPooler.
const attemptsPoolerFix = "an attempt holds a session lock from its start to its end, and a pooler in transaction mode (PgBouncer)" +
	" lends that session to other clients between transactions, so crashed attempts would look alive and locks would leak:" +
	" set Config.MaxAttempts to 0 for this store, or connect the store to PostgreSQL directly (or through a pooler in session mode)"

// probeFailed wraps the error of a pooler probe that could not finish (a connection
// failed): nothing was decided, the next call probes again, and the error is transient.
func probeFailed(err error) error {
	return contract.Chain("checking whether the connection goes through a pooler that moves transactions: "+contract.Bare(err)+
		" (nothing was decided: the next try checks again)", err, contract.ErrProbeFailed)
}

// poolerCheck remembers whether a store's handle reaches PostgreSQL through a pooler
// that moves transactions, probed once for both of its uses (at New, or at the first
// claim that carries an attempt): the statement cache and MaxAttempts. A probe that
// failed is tried again.
type poolerCheck struct {
	mu    sync.Mutex
	done  bool
	moves bool
	probe func(ctx context.Context) (bool, error)
}

// movesTransactions reports whether the store's transactions move between server
// connections, probing on the first call (and again after a probe that failed).
func (c *poolerCheck) movesTransactions(ctx context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		moves, err := c.probe(ctx)
		if err != nil {
			return false, probeFailed(err)
		}
		c.done, c.moves = true, moves
	}
	return c.moves, nil
}

// attempts fails with ErrAttemptsBehindPooler when the store's transactions move
// between server connections.
func (c *poolerCheck) attempts(ctx context.Context) error {
	moves, err := c.movesTransactions(ctx)
	if err == nil && moves {
		err = fmt.Errorf("%w: %s", contract.ErrAttemptsBehindPooler, attemptsPoolerFix)
	}
	return err
}

// statementCache fails with ErrStatementCache when the store's handle uses pgx's
// statement cache (cached) and its transactions move between server connections. Only
// a cached handle is probed.
func (c *poolerCheck) statementCache(ctx context.Context, cached bool) error {
	if !cached {
		return nil
	}
	moves, err := c.movesTransactions(ctx)
	if err == nil && moves {
		err = fmt.Errorf("inbox: %w: %s", contract.ErrStatementCache, statementCacheFix)
	}
	return err
}

// claim is attempts for a claim that carries an attempt.
func (c *poolerCheck) claim(ctx context.Context) error {
	if err := c.attempts(ctx); err != nil {
		return contract.Wrap("counting attempts (Config.MaxAttempts)", err)
	}
	return nil
}

// pgxMovesTransactions is poolerCheck.probe for a PostgresStore over db: one connection
// of a pool, or the connection, is probed with a second one opened for a moment outside
// the pool, so that a pool of one (or a busy pool) is never waited on.
func pgxMovesTransactions(db PgxDB) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		switch db := db.(type) {
		case *pgxpool.Pool:
			a, err := db.Acquire(ctx)
			if err != nil {
				return false, fmt.Errorf("taking a connection of the pool: %w", err)
			}
			defer a.Release()
			return connMovesTransactions(ctx, a.Conn())
		case *pgx.Conn:
			return connMovesTransactions(ctx, db)
		case *pgxpool.Conn:
			return connMovesTransactions(ctx, db.Conn())
		}
		return false, nil // no attempts on other handles (checkAttempts)
	}
}

// connMovesTransactions probes conn with a second connection of its config.
func connMovesTransactions(ctx context.Context, conn *pgx.Conn) (bool, error) {
	other, err := pgx.ConnectConfig(ctx, conn.Config())
	if err != nil {
		return false, fmt.Errorf("opening a second connection, for a moment: %w", err)
	}
	defer other.Close(context.WithoutCancel(ctx))
	return movesTransactions(ctx, conn.PgConn(), other.PgConn())
}

// sqlMovesTransactions is poolerCheck.probe for a SQLPostgresStore over db. On pgx's
// stdlib driver it probes as for pgx (a *sql.Conn with a second connection of its
// config); on another driver, with two connections of a *sql.DB (a pooler shows as a
// backend pid that changes, or a second client given the first's server connection,
// while the first holds none); a *sql.Conn on another driver cannot be probed, and
// passes.
func sqlMovesTransactions(db sqlstore.DB) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (moves bool, err error) {
		pool, isPool := db.(*sql.DB)
		if !isPool {
			conn, ok := db.(*sql.Conn)
			if !ok {
				return false, nil
			}
			err = conn.Raw(func(dc any) error {
				if pc, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
					moves, err = connMovesTransactions(ctx, pc.Conn())
				}
				return err
			})
			return moves, err
		}
		a, err := pool.Conn(ctx)
		if err != nil {
			return false, fmt.Errorf("taking a connection of the pool: %w", err)
		}
		defer a.Close()
		err = a.Raw(func(ca any) error {
			if pa, ok := ca.(interface{ Conn() *pgx.Conn }); ok {
				// A second connection outside the pool, for a moment: a pool of one (or
				// a busy one) is never waited on.
				moves, err = connMovesTransactions(ctx, pa.Conn())
				return err
			}
			return errNotPgx
		})
		if !errors.Is(err, errNotPgx) {
			return moves, err
		}
		if pool.Stats().MaxOpenConnections == 1 {
			return false, nil // another driver, and a pool of one: no second connection to probe with
		}
		b, err := pool.Conn(ctx)
		if err != nil {
			return false, fmt.Errorf("taking a second connection of the pool: %w", err)
		}
		defer b.Close()
		return sqlConnsMoveTransactions(ctx, a, b)
	}
}

var errNotPgx = errors.New("not pgx's driver")

// sqlConnsMoveTransactions is movesTransactions through database/sql, for a driver
// other than pgx's: a's pid, b's in a transaction, a's again, for probeRounds rounds.
func sqlConnsMoveTransactions(ctx context.Context, a, b *sql.Conn) (bool, error) {
	for range probeRounds {
		if moves, err := sqlConnsProbeRound(ctx, a, b); err != nil || moves {
			return moves, err
		}
	}
	return false, nil
}

// sqlConnsProbeRound is one round of sqlConnsMoveTransactions.
func sqlConnsProbeRound(ctx context.Context, a, b *sql.Conn) (bool, error) {
	const pid = "SELECT pg_backend_pid()"
	var first, held, next int64
	if err := a.QueryRowContext(ctx, pid).Scan(&first); err != nil {
		return false, fmt.Errorf("%s: %w", pid, err)
	}
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("BEGIN: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := tx.QueryRowContext(ctx, pid).Scan(&held); err != nil {
		return false, fmt.Errorf("%s: %w", pid, err)
	}
	if err := a.QueryRowContext(ctx, pid).Scan(&next); err != nil {
		return false, fmt.Errorf("%s: %w", pid, err)
	}
	return held == first || next != first, nil
}
