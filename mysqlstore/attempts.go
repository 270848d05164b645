package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// Attempts on MySQL, MariaDB, TiDB and Vitess (see attempts.go): the lock is a named
// lock (GET_LOCK) of the claim's session, named after the token, held from the statement
// that inserts the attempt's row until the row is gone. A named lock is the session's,
// not the transaction's, so it outlives a rollback and needs no row lock: the count is
// a plain read, which at REPEATABLE READ takes no gap lock (a locking read of the
// key's attempt rows would block the starts of the keys beside it until the handler
// ends). On Vitess, vtgate serves lock functions only in a SELECT of its own (no FROM),
// through a lock session of the client's session: they get statements of their own.

// mysqlAttemptQueries are the attempt statements of a MySQLStore.
type mysqlAttemptQueries struct {
	// start inserts the row only if GET_LOCK took the lock: ?consumer, ?key, ?token,
	// ?lock name. (Vitess and TiDB: "", and insert alone after getLock.)
	start string
	// insert inserts the row alone (beside a joined transaction, or on Vitess).
	insert string
	// getLock, isFree and release are the lock functions: ?lock name.
	getLock, isFree, release string
	// dead lists the key's other attempts whose lock is free: ?consumer, ?key, ?own
	// token, ?lock prefix. (Vitess: the other attempts, whose locks are then asked one
	// by one.)
	dead string
	// still counts which of the listed tokens still have a row: ?consumer, ?key, then
	// the tokens.
	still string
	// end deletes the row: ?consumer, ?key, ?token.
	end string
}

func newMySQLAttemptQueries(e Engine, a string) mysqlAttemptQueries {
	where := " WHERE `consumer` = ? AND `key` = ?"
	cols, vals := "(`consumer`, `key`, `attempt`)", "?, ?, ?"
	if e == TiDB { // TiDB refuses the column's UTC default: the store writes it
		cols, vals = "(`consumer`, `key`, `attempt`, `started_at`)", "?, ?, ?, UTC_TIMESTAMP(6)"
	}
	q := mysqlAttemptQueries{
		start:   "INSERT INTO " + a + " " + cols + " SELECT " + vals + " FROM DUAL WHERE GET_LOCK(?, 0) = 1",
		insert:  "INSERT INTO " + a + " " + cols + " VALUES (" + vals + ")",
		getLock: "SELECT GET_LOCK(?, 0)",
		isFree:  "SELECT IS_FREE_LOCK(?)",
		release: "SELECT RELEASE_LOCK(?)",
		dead:    "SELECT `attempt` FROM " + a + where + " AND `attempt` <> ? AND IS_FREE_LOCK(CONCAT(?, `attempt`)) = 1",
		still:   "SELECT COUNT(*) FROM " + a + where + " AND `attempt` IN ",
		end:     "DELETE FROM " + a + where + " AND `attempt` = ?",
	}
	switch e {
	case Vitess:
		q.start = ""
		q.dead = "SELECT `attempt` FROM " + a + where + " AND `attempt` <> ?"
	case TiDB: // TiDB evaluates GET_LOCK twice in start's WHERE: a release would leave it held
		q.start = ""
	}
	return q
}

// mysqlAttempts is sqlAttempts for MySQLStore.
type mysqlAttempts struct{ s *Store }

func lockName(rec contract.Record) string { return mysqlAttemptLockPrefix + rec.Attempt }

// errLockTaken means an attempt's lock was held already: only another attempt with the
// same token (a random 128-bit one) could hold it.
var errLockTaken = errors.New("the attempt's lock is held by another session")

func (a mysqlAttempts) Start(ctx context.Context, conn sqlstore.DB, rec contract.Record) error {
	q := a.s.sql.attempts
	if q.start == "" { // Vitess, TiDB
		if err := a.lock(ctx, conn, rec); err != nil {
			return err
		}
		_, err := conn.ExecContext(ctx, q.insert, rec.Consumer, rec.Key, rec.Attempt)
		return err
	}
	res, err := conn.ExecContext(ctx, q.start, rec.Consumer, rec.Key, rec.Attempt, lockName(rec))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errors.Join(err, errLockTaken)
	}
	return nil
}

// lock takes rec's lock in the session of q.
func (a mysqlAttempts) lock(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, rec contract.Record) error {
	var got sql.NullInt64
	if err := q.QueryRowContext(ctx, a.s.sql.attempts.getLock, lockName(rec)).Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return errLockTaken
	}
	return nil
}

// CountInTx: only at READ COMMITTED do the count's two reads each take a snapshot of
// their own, the second after the first's lock checks. At REPEATABLE READ (the
// session's level with SessionIsolation, or on Vitess) they share one, so an attempt
// that ends between them still shows its row (on Vitess the lock checks are statements
// of their own, round trips apart: the race is wide); a SERIALIZABLE read locks what it
// reads until the handler ends. Those count on a second connection.
func (a mysqlAttempts) CountInTx() bool {
	return a.s.cfg.Isolation == sql.LevelReadCommitted
}

func (a mysqlAttempts) Unfinished(ctx context.Context, tx sqlstore.Queryer, rec contract.Record) (int, error) {
	q := a.s.sql.attempts
	var tokens []string
	var err error
	if a.s.cfg.Engine == Vitess {
		var others []string
		if others, err = sqlstore.QueryStrings(ctx, tx, q.dead, rec.Consumer, rec.Key, rec.Attempt); err != nil {
			return 0, err
		}
		for _, tok := range others {
			var free sql.NullInt64
			if err := tx.QueryRowContext(ctx, q.isFree, mysqlAttemptLockPrefix+tok).Scan(&free); err != nil {
				return 0, err
			}
			if free.Int64 == 1 {
				tokens = append(tokens, tok)
			}
		}
	} else if tokens, err = sqlstore.QueryStrings(ctx, tx, q.dead, rec.Consumer, rec.Key, rec.Attempt, mysqlAttemptLockPrefix); err != nil {
		return 0, err
	}
	if len(tokens) == 0 {
		return 0, nil
	}
	args := []any{rec.Consumer, rec.Key}
	for _, tok := range tokens {
		args = append(args, tok)
	}
	var n int
	err = tx.QueryRowContext(ctx, q.still+"("+strings.TrimSuffix(strings.Repeat("?, ", len(tokens)), ", ")+")", args...).Scan(&n)
	return n, err
}

func (a mysqlAttempts) End(ctx context.Context, q sqlstore.Execer, rec contract.Record) error {
	_, err := q.ExecContext(ctx, a.s.sql.attempts.end, rec.Consumer, rec.Key, rec.Attempt)
	return err
}

func (a mysqlAttempts) Unlock(ctx context.Context, conn sqlstore.DB, rec contract.Record) error {
	var released sql.NullInt64 // 1, 0 when another session holds it, NULL when no one does
	return conn.QueryRowContext(ctx, a.s.sql.attempts.release, lockName(rec)).Scan(&released)
}

// StartJoined takes the lock in the joined transaction's session, which the attempt's
// end releases there, and writes the row on another connection.
func (a mysqlAttempts) StartJoined(ctx context.Context, tx *sql.Tx, rec contract.Record) error {
	db, release, err := sqlstore.AttemptDB(ctx, a.s.db)
	if err != nil {
		return err
	}
	defer release()
	if err := a.lock(ctx, tx, rec); err != nil {
		return a.s.wrap("starting the attempt", err)
	}
	if _, err := db.ExecContext(ctx, a.s.sql.attempts.insert, rec.Consumer, rec.Key, rec.Attempt); err != nil {
		return a.s.wrap("starting the attempt", err)
	}
	return nil
}

func (a mysqlAttempts) EndJoined(ctx context.Context, rec contract.Record, end bool) error {
	if end {
		return a.s.EndAttempt(ctx, rec)
	}
	return a.s.releaseJoined(ctx, rec)
}

// EndAttempt implements Store: it deletes the attempt's row, on another connection than
// a joined transaction's (see attemptDB), and beside a joined transaction then releases
// the attempt's lock in that transaction's session.
func (s *Store) EndAttempt(ctx context.Context, rec contract.Record) error {
	if rec.Attempt == "" {
		return nil
	}
	db, release, err := sqlstore.AttemptDB(ctx, s.db)
	if err != nil {
		return err
	}
	defer release()
	if _, err := db.ExecContext(context.WithoutCancel(ctx), s.sql.attempts.end, rec.Consumer, rec.Key, rec.Attempt); err != nil {
		return contract.Join(s.wrap("ending the attempt", err), s.releaseJoined(ctx, rec))
	}
	return s.releaseJoined(ctx, rec)
}

// releaseJoined releases rec's lock in the session of the joined transaction ctx
// carries, if any. When that transaction ended already, the lock stays with its
// connection until that closes: the attempt then looks alive, and is not counted.
func (s *Store) releaseJoined(ctx context.Context, rec contract.Record) error {
	tx, ok := contract.TxFromContext(ctx).(*sql.Tx)
	if !ok {
		return nil
	}
	var released sql.NullInt64
	err := tx.QueryRowContext(context.WithoutCancel(ctx), s.sql.attempts.release, lockName(rec)).Scan(&released)
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		return s.wrap("releasing the attempt's lock", err)
	}
	return nil
}

// mysqlAttemptLockPrefix starts the GET_LOCK name of an attempt: the names are the
// server's, shared by every table and application.
const mysqlAttemptLockPrefix = "inbox."

// CheckAttempts implements attemptChecker.
func (s *Store) CheckAttempts(context.Context) error {
	a := mysqlAttempts{s}
	return sqlstore.CheckAttempts(s.db, a.CountInTx(), s.cfg.Isolation.String())
}
