package postgresstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// Attempts on PostgreSQL (see attempts.go): the lock is an advisory lock whose key is
// the hash of the attempt token (hashtextextended), at session level from the start to
// the end of a delivery the store began, at transaction level in a joined transaction,
// whose owner ends it.

// pgAttemptQueries are the attempt statements of the PostgreSQL stores, on the table
// <table>_attempts.
type pgAttemptQueries struct {
	// start locks the token and then inserts the attempt's row: $1 consumer, $2 key, $3
	// token. The lock is taken in a subquery that runs before the insert.
	start string
	// insert inserts the row alone (beside a joined transaction that holds the lock).
	insert string
	// xactLock takes the lock for the rest of a joined transaction: $1 token.
	xactLock string
	// unlock releases the session lock: $1 token.
	unlock string
	// end deletes the row: $1 consumer, $2 key, $3 token.
	end string
	// dead lists the key's other attempts whose lock is free, taking it (shared, for the
	// rest of the transaction): $1 consumer, $2 key, $3 own token.
	dead string
	// still counts which of the tokens $3 (text[]) still have a row, with a snapshot
	// taken after dead's lock checks: an attempt that ended deleted its row before it
	// let its lock go, so a row still there is an attempt that died.
	still string
}

func newPgAttemptQueries(a string) pgAttemptQueries {
	lock := func(token string) string { return `hashtextextended(` + token + `, 0)` }
	where := ` WHERE consumer = $1 AND key = $2 AND attempt = $3`
	return pgAttemptQueries{
		start:    `INSERT INTO ` + a + ` (consumer, key, attempt) SELECT $1, $2, $3 FROM (SELECT pg_advisory_lock(` + lock("$3::text") + `)) l`,
		insert:   `INSERT INTO ` + a + ` (consumer, key, attempt) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		xactLock: `SELECT pg_advisory_xact_lock(` + lock("$1::text") + `)`,
		unlock:   `SELECT pg_advisory_unlock(` + lock("$1::text") + `)`,
		end:      `DELETE FROM ` + a + where,
		dead: `SELECT attempt FROM ` + a + ` WHERE consumer = $1 AND key = $2 AND attempt <> $3` +
			` AND pg_try_advisory_xact_lock_shared(` + lock("attempt") + `)`,
		still: `SELECT count(*) FROM ` + a + ` WHERE consumer = $1 AND key = $2 AND attempt = ANY($3::text[])`,
	}
}

// literal returns the start of rec's attempt as simple-protocol statements with the
// values quoted in (see foldedClaim.beginInsert): committed without waiting for the WAL
// flush, like every count of attempts (a server crash may lose the last ones, which only
// delays a poison verdict).
func (q pgAttemptQueries) literal(attempts string, rec contract.Record) string {
	tok := quoteLiteral(rec.Attempt)
	return "BEGIN; SET LOCAL synchronous_commit TO OFF; INSERT INTO " + attempts +
		" (consumer, key, attempt) SELECT " + quoteLiteral(rec.Consumer) + ", " + quoteLiteral(rec.Key) + ", " + tok +
		" FROM (SELECT pg_advisory_lock(hashtextextended(" + tok + ", 0))) l; COMMIT; "
}

// startPgx starts rec's attempt on conn, the connection the claim then runs on, in one
// round trip.
func (s *Store) startPgx(ctx context.Context, conn *pgx.Conn, rec contract.Record) error {
	batch := &pgx.Batch{}
	batch.Queue(`BEGIN`)
	batch.Queue(`SET LOCAL synchronous_commit TO OFF`)
	batch.Queue(s.sql.attempts.start, rec.Consumer, rec.Key, rec.Attempt)
	batch.Queue(`COMMIT`)
	if err := conn.SendBatch(ctx, batch).Close(); err != nil {
		// Its outcome is not known: a clean end deletes the row if it was written.
		return contract.Join(s.wrap("starting the attempt", err), s.releasePgx(ctx, conn, rec, true))
	}
	return nil
}

// releasePgx ends the attempt on conn after the claim's transaction: it rolls back what
// is open, deletes the row when end is set (a clean end; otherwise the attempt stays,
// as after a crash) and then releases the lock, in one round trip, with a context that
// cannot be cancelled. Unlocking a lock that is not held only warns. The delete is
// committed before the unlock: the statements of a pipeline outside a transaction share
// one implicit transaction, committed at its end, after the unlock.
func (s *Store) releasePgx(ctx context.Context, conn *pgx.Conn, rec contract.Record, end bool) error {
	if conn.IsClosed() {
		return fmt.Errorf("inbox: ending the attempt: the connection is closed")
	}
	batch := &pgx.Batch{}
	batch.Queue(`ROLLBACK`)
	if end {
		batch.Queue(`BEGIN`)
		batch.Queue(s.sql.attempts.end, rec.Consumer, rec.Key, rec.Attempt)
		batch.Queue(`COMMIT`)
	}
	batch.Queue(s.sql.attempts.unlock, rec.Attempt)
	ctx = context.WithoutCancel(ctx)
	if err := conn.SendBatch(ctx, batch).Close(); err != nil {
		// A failed statement skips the rest of the pipeline, and leaves an explicit
		// transaction aborted: the lock must still go, or it would stay with the
		// connection (its row, if any, looking alive), and the connection must come back
		// usable. In the simple protocol: pgx's statement cache may be out of step after
		// a failed pipeline.
		return contract.Join(s.wrap("ending the attempt", err), s.unlockSimple(ctx, conn, rec))
	}
	return nil
}

// unlockSimple rolls back what is open on conn and releases rec's lock, in one simple
// query, with the token quoted in when it is plain (the middleware's are hex), and with a
// parameter otherwise.
func (s *Store) unlockSimple(ctx context.Context, conn *pgx.Conn, rec contract.Record) error {
	if !plainToken(rec.Attempt) {
		if _, err := conn.PgConn().Exec(ctx, "ROLLBACK").ReadAll(); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, s.sql.attempts.unlock, rec.Attempt)
		return err
	}
	_, err := conn.PgConn().Exec(ctx, "ROLLBACK; SELECT pg_advisory_unlock(hashtextextended('"+rec.Attempt+"', 0))").ReadAll()
	return err
}

// plainToken reports whether tok is letters, digits, '-' and '_' only: safe to quote
// into SQL whatever the session's settings.
func plainToken(tok string) bool {
	for _, r := range tok {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return tok != ""
}

// attemptsUnsupported explains why a store over db cannot count attempts.
func (s *Store) attemptsUnsupported() error {
	return fmt.Errorf("MaxAttempts needs a PostgresStore over a *pgxpool.Pool, a *pgx.Conn or a *pgxpool.Conn (its attempts hold a session lock from their start to their end), not a %T: give the store one of those, or set MaxAttempts to 0", s.db)
}

// CheckAttempts implements attemptChecker.
func (s *Store) CheckAttempts(ctx context.Context) error {
	if s.pin == nil {
		return s.attemptsUnsupported()
	}
	if _, pool := s.db.(*pgxpool.Pool); !pool && !s.countInTx {
		return fmt.Errorf("MaxAttempts over a single connection (%T) needs PostgresConfig.TxOptions at READ COMMITTED: at %s the claim's snapshot predates its wait, and the count of dead attempts must then run on a second connection; use a *pgxpool.Pool, or READ COMMITTED", s.db, s.cfg.TxOptions.IsoLevel)
	}
	return s.pooler.attempts(ctx)
}

// pgxQueryer is what a pgx.Tx and a *pgx.Conn share for the count.
type pgxQueryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// deadPgx returns, from rows of the dead query, how many of those attempts died: the
// ones whose row is still there at a later snapshot.
func (s *Store) deadPgx(ctx context.Context, q pgxQueryer, rec contract.Record, rows pgx.Rows) (int, error) {
	tokens, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tokens) == 0 {
		return 0, err
	}
	var n int
	err = q.QueryRow(ctx, s.sql.attempts.still, rec.Consumer, rec.Key, tokens).Scan(&n)
	return n, err
}

// unfinishedPgx counts rec's key's attempts that died, in tx, which holds the key.
func (s *Store) unfinishedPgx(ctx context.Context, tx pgx.Tx, rec contract.Record) (int, error) {
	rows, err := tx.Query(ctx, s.sql.attempts.dead, rec.Consumer, rec.Key, rec.Attempt)
	if err != nil {
		return 0, err
	}
	return s.deadPgx(ctx, tx, rec, rows)
}

// countAside counts rec's key's attempts that died outside the claim's transaction,
// whose snapshot may predate its wait on the key (a joined transaction, or one at
// REPEATABLE READ or SERIALIZABLE): every statement on asideDB's connection runs in a
// transaction of its own, so the second one's snapshot follows the first's lock checks.
func (s *Store) countAside(ctx context.Context, rec contract.Record) (int, error) {
	db, release, err := s.asideDB(ctx)
	if err != nil {
		return 0, err
	}
	defer release()
	rows, err := db.Query(ctx, s.sql.attempts.dead, rec.Consumer, rec.Key, rec.Attempt)
	var n int
	if err == nil {
		n, err = s.deadPgx(ctx, db, rec, rows)
	}
	if err != nil {
		return 0, s.wrap("counting the attempts", err)
	}
	return n, nil
}

// startJoinedPgx starts rec's attempt beside the joined transaction tx: the lock in tx,
// for as long as its owner keeps it, then the row on another connection (see
// attemptDB), committed there.
func (s *Store) startJoinedPgx(ctx context.Context, tx pgx.Tx, rec contract.Record) error {
	db, release, err := s.attemptDB(ctx)
	if err != nil {
		return err
	}
	defer release()
	if _, err := tx.Exec(ctx, s.sql.attempts.xactLock, rec.Attempt); err != nil {
		return s.wrap("starting the attempt", err)
	}
	if _, err := db.Exec(ctx, s.sql.attempts.insert, rec.Consumer, rec.Key, rec.Attempt); err != nil {
		return s.wrap("starting the attempt", err)
	}
	return nil
}

// EndAttempt implements Store: it deletes the attempt's row, on another connection than
// a joined transaction's (see attemptDB).
func (s *Store) EndAttempt(ctx context.Context, rec contract.Record) error {
	if rec.Attempt == "" {
		return nil
	}
	db, release, err := s.attemptDB(ctx)
	if err != nil {
		return err
	}
	defer release()
	if _, err := db.Exec(context.WithoutCancel(ctx), s.sql.attempts.end, rec.Consumer, rec.Key, rec.Attempt); err != nil {
		return s.wrap("ending the attempt", err)
	}
	return nil
}

// pgSQLAttempts is sqlAttempts for SQLPostgresStore.
type pgSQLAttempts struct{ s *SQLStore }

func (a pgSQLAttempts) Start(ctx context.Context, conn sqlstore.DB, rec contract.Record) error {
	_, err := conn.ExecContext(ctx, a.s.sql.attempts.start, rec.Consumer, rec.Key, rec.Attempt)
	return err
}

func (a pgSQLAttempts) Unfinished(ctx context.Context, db sqlstore.Queryer, rec contract.Record) (int, error) {
	q := a.s.sql.attempts
	tokens, err := sqlstore.QueryStrings(ctx, db, q.dead, rec.Consumer, rec.Key, rec.Attempt)
	if err != nil || len(tokens) == 0 {
		return 0, err
	}
	var n int
	err = db.QueryRowContext(ctx, q.still, rec.Consumer, rec.Key, tokens).Scan(&n)
	return n, err
}

func (a pgSQLAttempts) CountInTx() bool { return a.s.cfg.Isolation == sql.LevelReadCommitted }

func (a pgSQLAttempts) End(ctx context.Context, q sqlstore.Execer, rec contract.Record) error {
	_, err := q.ExecContext(ctx, a.s.sql.attempts.end, rec.Consumer, rec.Key, rec.Attempt)
	return err
}

func (a pgSQLAttempts) Unlock(ctx context.Context, conn sqlstore.DB, rec contract.Record) error {
	_, err := conn.ExecContext(ctx, a.s.sql.attempts.unlock, rec.Attempt)
	return err
}

func (a pgSQLAttempts) StartJoined(ctx context.Context, tx *sql.Tx, rec contract.Record) error {
	db, release, err := sqlstore.AttemptDB(ctx, a.s.db)
	if err != nil {
		return err
	}
	defer release()
	if _, err := tx.ExecContext(ctx, a.s.sql.attempts.xactLock, rec.Attempt); err != nil {
		return a.s.wrap("starting the attempt", err)
	}
	if _, err := db.ExecContext(ctx, a.s.sql.attempts.insert, rec.Consumer, rec.Key, rec.Attempt); err != nil {
		return a.s.wrap("starting the attempt", err)
	}
	return nil
}

// EndJoined deletes the row; the lock is the joined transaction's, released by its owner.
func (a pgSQLAttempts) EndJoined(ctx context.Context, rec contract.Record, end bool) error {
	if !end {
		return nil
	}
	return a.s.EndAttempt(ctx, rec)
}

// EndAttempt implements Store: it deletes the attempt's row, on another connection than
// a joined transaction's (see attemptDB).
func (s *SQLStore) EndAttempt(ctx context.Context, rec contract.Record) error {
	if rec.Attempt == "" {
		return nil
	}
	db, release, err := sqlstore.AttemptDB(ctx, s.db)
	if err != nil {
		return err
	}
	defer release()
	if _, err := db.ExecContext(context.WithoutCancel(ctx), s.sql.attempts.end, rec.Consumer, rec.Key, rec.Attempt); err != nil {
		return s.wrap("ending the attempt", err)
	}
	return nil
}

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
