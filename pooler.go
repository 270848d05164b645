package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A connection pooler in transaction mode (PgBouncer's usual pool_mode) between pgx and
// PostgreSQL runs each transaction of a client connection on whichever server connection
// is free. Session state does not follow the client: pgx's statement cache (its default
// mode) prepares named statements on one server connection and finds them missing on
// the next (26000), or finds them prepared there by another client (42P05). The stores
// use no other session state: settings are set for the transaction only. See ADR 93.

// ErrStatementCache means pgx's statement cache (default_query_exec_mode=cache_statement,
// pgx's default, also under database/sql's "pgx" driver) meets a pooler that moves a
// client's transactions between server connections, such as PgBouncer in transaction
// mode: prepared statements fail there. New finds it when the pooler is visible, and a
// store call that fails with such an error wraps it. Add default_query_exec_mode=exec
// (or cache_describe, or simple_protocol) to the DSN. It is transient for a message: a
// fault of the deployment, not of the message, so a failed message is nacked and
// processed once the DSN is fixed, never sent to a poison queue.
var ErrStatementCache = errors.New("pgx's statement cache behind a transaction pooler")

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

// checkPgxPooler fails with ErrStatementCache when db uses pgx's statement cache through
// a pooler that moves transactions between server connections. Other modes, and
// PostgreSQL reached directly or through a pooler in session mode, pass.
func checkPgxPooler(ctx context.Context, db PgxDB) error {
	switch db := db.(type) {
	case *pgxpool.Pool:
		if db.Config().ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || db.Config().MaxConns < 2 {
			return nil
		}
		a, err := db.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("inbox: checking the connection: %w", err)
		}
		defer a.Release()
		b, err := db.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("inbox: checking the connection: %w", err)
		}
		defer b.Release()
		return probePooler(ctx, a.Conn().PgConn(), b.Conn().PgConn())
	case *pgx.Conn:
		if db.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
			return nil
		}
		other, err := pgx.ConnectConfig(ctx, db.Config())
		if err != nil {
			return fmt.Errorf("inbox: checking the connection (a second one, for a moment): %w", err)
		}
		defer other.Close(context.WithoutCancel(ctx))
		return probePooler(ctx, db.PgConn(), other.PgConn())
	}
	return nil
}

// checkSQLPooler is checkPgxPooler for a *sql.DB on pgx's stdlib driver.
func checkSQLPooler(ctx context.Context, db SQLDB) error {
	pool, ok := db.(*sql.DB)
	if !ok || pool.Stats().MaxOpenConnections == 1 {
		return nil
	}
	a, err := pool.Conn(ctx)
	if err != nil {
		return fmt.Errorf("inbox: checking the connection: %w", err)
	}
	defer a.Close()
	b, err := pool.Conn(ctx)
	if err != nil {
		return fmt.Errorf("inbox: checking the connection: %w", err)
	}
	defer b.Close()
	return a.Raw(func(ca any) error {
		return b.Raw(func(cb any) error {
			pa, okA := ca.(interface{ Conn() *pgx.Conn })
			pb, okB := cb.(interface{ Conn() *pgx.Conn })
			if !okA || !okB || pa.Conn().Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
				return nil // not pgx's driver, or not its statement cache
			}
			return probePooler(ctx, pa.Conn().PgConn(), pb.Conn().PgConn())
		})
	})
}

// probePooler finds out, with simple-protocol queries only (which prepare nothing),
// whether a's transactions can run on server connections other than its own. Without a
// pooler, the server's backend pid is the one the connection was given at startup; a
// pooler gives the client its own. Then, while b holds a server connection in a
// transaction, a's next query runs on another server connection than its previous one,
// or b got a's: either shows a pool that moves transactions. In session mode a keeps its
// server connection, and the check passes.
func probePooler(ctx context.Context, a, b *pgconn.PgConn) error {
	first, err := backendPID(ctx, a, "SELECT pg_backend_pid()", 0)
	if err != nil || first == a.PID() {
		return err
	}
	held, err := backendPID(ctx, b, "BEGIN; SELECT pg_backend_pid()", 1)
	if err != nil {
		return err
	}
	defer func() { _, _ = b.Exec(context.WithoutCancel(ctx), "ROLLBACK").ReadAll() }() // b's probe transaction
	next, err := backendPID(ctx, a, "SELECT pg_backend_pid()", 0)
	if err != nil {
		return err
	}
	if held == first || next != first {
		return fmt.Errorf("inbox: %w: %s", ErrStatementCache, statementCacheFix)
	}
	return nil
}

// backendPID runs query, a simple-protocol query, and reads the pid its result number i
// returns.
func backendPID(ctx context.Context, conn *pgconn.PgConn, query string, i int) (uint32, error) {
	results, err := conn.Exec(ctx, query).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("inbox: checking the connection: %w", err)
	}
	if len(results) <= i || len(results[i].Rows) != 1 || len(results[i].Rows[0]) != 1 {
		return 0, errors.New("inbox: checking the connection: pg_backend_pid() returned no row")
	}
	pid, err := strconv.ParseUint(string(results[i].Rows[0][0]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("inbox: checking the connection: pg_backend_pid(): %w", err)
	}
	return uint32(pid), nil
}
