package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// SQLDB is what the database/sql stores (SQLPostgresStore, MySQLStore) need of a
// database. *sql.DB satisfies it, and so does *sql.Conn (which serves one message at a
// time).
type SQLDB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sqlAttempts is what a database/sql store does for attempts (see attempts.go).
type sqlAttempts interface {
	// start takes rec's lock on conn, the claim's connection, and inserts rec's row,
	// committed.
	start(ctx context.Context, conn SQLDB, rec Record) error
	// unfinished counts the key's attempts that died, through q: the claim's
	// transaction, which holds the key, when countInTx, a connection of its own
	// otherwise (see countAttempts).
	unfinished(ctx context.Context, q sqlQueryer, rec Record) (int, error)
	// countInTx reports whether the store's own claim transactions can count: at a
	// level whose reads take a snapshot after the claim's wait and lock nothing.
	countInTx() bool
	// end deletes rec's row with q: tx, to commit with the key, or conn, after the
	// claim's transaction ended.
	end(ctx context.Context, q sqlExecer, rec Record) error
	// unlock releases rec's lock on conn once its row is gone (or, abandoned, is to
	// stay).
	unlock(ctx context.Context, conn SQLDB, rec Record) error
	// startJoined starts rec's attempt beside tx, a joined transaction: the lock in tx's
	// session, the row on another connection (attemptDB).
	startJoined(ctx context.Context, tx *sql.Tx, rec Record) error
	// endJoined ends (end) or abandons rec's attempt beside a joined transaction, which
	// ctx carries: the row deleted on another connection, then the lock released.
	endJoined(ctx context.Context, rec Record, end bool) error
}

// sqlQueryer is what a *sql.Tx, *sql.DB and *sql.Conn share for a query.
type sqlQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// countAttempts counts rec's key's attempts that died, once the claim in tx holds the
// key: in tx when it is the store's own and att.countInTx, and otherwise outside it, on
// a connection of its own (asideSQL) where each statement is a transaction of its own:
// a joined transaction's, or a REPEATABLE READ or SERIALIZABLE one's, snapshot may
// predate the claim's wait, and an InnoDB SERIALIZABLE read locks what it reads.
func countAttempts(ctx context.Context, att sqlAttempts, db SQLDB, tx *sql.Tx, joined bool, rec Record,
	wrap func(doing string, err error) error) (int, error) {
	if !joined && att.countInTx() {
		n, err := att.unfinished(ctx, tx, rec)
		if err != nil {
			return 0, wrap("counting the attempts", err)
		}
		return n, nil
	}
	aside, release, err := asideSQL(ctx, db)
	if err != nil {
		return 0, err
	}
	defer release()
	n, err := att.unfinished(ctx, aside, rec)
	if err != nil {
		return 0, wrap("counting the attempts", err)
	}
	return n, nil
}

// sqlExecer is what a *sql.Tx, *sql.DB and *sql.Conn share for a statement.
type sqlExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// sqlInboxTx is the transaction of a claimed key in a database/sql store.
//
// A transaction the store began does not end when ctx does (see claimInNewTx), so
// ErrTxDone on it means the handler ended it. A joined transaction ends when its
// owner's context does: ErrTxDone while ctx is done means that.
type sqlInboxTx struct {
	tx     *sql.Tx
	joined bool
	// setOutput stores the output with the claimed key.
	setOutput func(ctx context.Context, tx *sql.Tx, output []byte) error
	// wrap classifies the database's own errors.
	wrap func(doing string, err error) error
	// rec is the claimed record; with an Attempt, att ends it on conn, the claim's
	// connection.
	rec  Record
	att  sqlAttempts
	conn SQLDB
	// release gives back a connection the store held for the transaction, once it
	// ended; nil otherwise.
	release  func()
	finished bool
}

func (t *sqlInboxTx) Handle() any { return t.tx }

func (t *sqlInboxTx) Commit(ctx context.Context, output []byte) error {
	if output != nil {
		if err := t.setOutput(ctx, t.tx, output); err != nil {
			return t.ended(ctx, "storing the produced messages", err)
		}
	}
	if t.joined {
		return nil
	}
	attempt := t.rec.Attempt != ""
	if attempt {
		if err := t.att.end(ctx, t.tx, t.rec); err != nil {
			return t.ended(ctx, "ending the attempt", err)
		}
	}
	defer t.done()
	if err := t.tx.Commit(); err != nil {
		err = t.ended(ctx, "committing", err)
		if attempt { // rolled back, or not known: a clean end, or EndAttempt's
			err = join(err, t.endOnConn(ctx, true))
		}
		return err
	}
	if attempt { // its row went with the key; a failure here is a connection that broke
		_ = t.att.unlock(ctx, t.conn, t.rec)
	}
	return nil
}

func (t *sqlInboxTx) Rollback(ctx context.Context) error { return t.rollback(ctx, true) }

func (t *sqlInboxTx) Abandon(ctx context.Context) error { return t.rollback(ctx, false) }

func (t *sqlInboxTx) rollback(ctx context.Context, end bool) error {
	if t.finished {
		return nil
	}
	if t.joined { // the owner rolls back: only the attempt ends here
		t.finished = true
		if t.rec.Attempt == "" {
			return nil
		}
		return t.att.endJoined(ctx, t.rec, end)
	}
	defer t.done()
	err := rollbackSQL(t.tx)
	if t.rec.Attempt != "" {
		err = join(err, t.endOnConn(ctx, end))
	}
	return err
}

// endOnConn ends (end) or abandons the attempt after the claim's transaction ended: the
// row deleted, then the lock released, on the claim's connection.
func (t *sqlInboxTx) endOnConn(ctx context.Context, end bool) error {
	return endAttemptSQL(ctx, t.att, t.conn, t.rec, end, t.wrap)
}

// endAttemptSQL deletes rec's row on conn when end is set, then releases rec's lock, with
// a context that cannot be cancelled.
func endAttemptSQL(ctx context.Context, att sqlAttempts, conn SQLDB, rec Record, end bool, wrap func(doing string, err error) error) error {
	ctx = context.WithoutCancel(ctx)
	if end {
		if err := att.end(ctx, conn, rec); err != nil {
			return join(wrap("ending the attempt", err), att.unlock(ctx, conn, rec))
		}
	}
	if err := att.unlock(ctx, conn, rec); err != nil {
		return wrap("releasing the attempt's lock", err)
	}
	return nil
}

// done gives back the connection the store held, once.
func (t *sqlInboxTx) done() {
	t.finished = true
	if t.release != nil {
		t.release()
		t.release = nil
	}
}

// ended classifies an error of a statement on the claimed transaction.
func (t *sqlInboxTx) ended(ctx context.Context, doing string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The statement did not run, or the driver gave up on it: nothing committed.
		return fmt.Errorf("inbox: %s: %w", doing, join(ctxErr, err))
	}
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("inbox: %s: %w", doing, ErrTxDone)
	}
	return t.wrap(doing, err)
}

// rollbackSQL rolls tx back; a transaction already ended is not an error. (*sql.Tx).Rollback
// takes no context, so a cancelled message context cannot stop it.
func rollbackSQL(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("inbox: rolling back: %w", err)
	}
	return nil
}

// claimInNewTx begins a transaction at isolation and claims rec's key in it with claim,
// after starting rec's attempt, when it has one, with att on the same connection. A
// duplicate or an error ends the transaction (and the attempt); a new key leaves it
// open in the Claim, with the attempts that died counted.
//
// The transaction is begun on a connection taken with ctx, but with ctx's cancellation
// cut off: database/sql would otherwise roll it back by itself, asynchronously, when
// ctx ends, between two statements of the store's (leaving a session setting changed)
// and, for drivers that cannot reset a session, by closing the connection, which kills
// a *sql.Conn handle. The store and the middleware end the transaction on every path;
// a statement still sees ctx, so a cancelled message stops at its next statement.
func claimInNewTx(ctx context.Context, db SQLDB, isolation sql.IsolationLevel, wrap func(doing string, err error) error,
	rec Record, att sqlAttempts, claim func(tx *sql.Tx) (Claim, error)) (Claim, error) {
	conn, release := db, func() {}
	if pool, ok := db.(*sql.DB); ok {
		c, err := pool.Conn(ctx)
		if err != nil {
			return Claim{}, wrap("acquiring a connection", err)
		}
		conn, release = c, func() { _ = c.Close() }
	} else if err := ctx.Err(); err != nil {
		return Claim{}, wrap("beginning the transaction", err)
	}
	attempt := rec.Attempt != ""
	if attempt {
		if err := att.start(ctx, conn, rec); err != nil {
			err = join(wrap("starting the attempt", err), endAttemptSQL(ctx, att, conn, rec, true, wrap))
			release()
			return Claim{}, err
		}
	}
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), &sql.TxOptions{Isolation: isolation})
	if err != nil {
		err = wrap("beginning the transaction", err)
		if attempt {
			err = join(err, endAttemptSQL(ctx, att, conn, rec, true, wrap))
		}
		release()
		return Claim{}, err
	}
	c, err := claim(tx)
	if err == nil && !c.Duplicate && attempt {
		c.Unfinished, err = countAttempts(ctx, att, db, tx, false, rec, wrap)
	}
	if err != nil || c.Duplicate {
		err = join(err, rollbackSQL(tx))
		if attempt { // a duplicate, or a claim that failed cleanly: its attempt ends
			err = join(err, endAttemptSQL(ctx, att, conn, rec, true, wrap))
		}
		release()
		if err != nil {
			return Claim{}, err
		}
		return c, nil
	}
	t := c.Tx.(*sqlInboxTx)
	t.release, t.conn, t.rec, t.att = release, conn, rec, att
	return c, nil
}

// claimJoinedSQL claims rec's key in tx, a transaction the caller began, with claim,
// starting rec's attempt beside it first.
func claimJoinedSQL(ctx context.Context, db SQLDB, tx *sql.Tx, rec Record, att sqlAttempts, wrap func(doing string, err error) error,
	claim func(tx *sql.Tx) (Claim, error)) (Claim, error) {
	attempt := rec.Attempt != ""
	if attempt {
		if err := att.startJoined(ctx, tx, rec); err != nil {
			return Claim{}, join(err, att.endJoined(ctx, rec, true))
		}
	}
	c, err := claim(tx)
	if err == nil && !c.Duplicate && attempt {
		c.Unfinished, err = countAttempts(ctx, att, db, tx, true, rec, wrap)
	}
	if attempt && (err != nil || c.Duplicate) {
		err = join(err, att.endJoined(ctx, rec, true))
	}
	if err != nil {
		return Claim{}, err
	}
	if t, ok := c.Tx.(*sqlInboxTx); ok {
		t.rec, t.att = rec, att
	}
	return c, nil
}

// readStoredSQL reads, for a duplicate, what the first delivery of rec stored; query
// selects fingerprint and output by consumer and key: its text, or a *sql.Stmt of tx.
func readStoredSQL(ctx context.Context, tx *sql.Tx, query any, rec Record, wrap func(doing string, err error) error) (Claim, error) {
	claim := Claim{Duplicate: true}
	var row *sql.Row
	switch q := query.(type) {
	case *sql.Stmt:
		row = q.QueryRowContext(ctx, rec.Consumer, rec.Key)
	default:
		row = tx.QueryRowContext(ctx, q.(string), rec.Consumer, rec.Key)
	}
	if err := row.Scan(&claim.Fingerprint, &claim.Output); err != nil {
		if errors.Is(err, sql.ErrNoRows) { // deleted (Forget, purge) since the insert
			return Claim{}, fmt.Errorf("inbox: the key vanished while being claimed: %w", ErrContended)
		}
		return Claim{}, wrap("reading the stored key", err)
	}
	return claim, nil
}

// joinedSQLTx returns tx as a *sql.Tx, for ClaimIn.
func joinedSQLTx(tx any, store string) (*sql.Tx, error) {
	sqlTx, ok := tx.(*sql.Tx)
	if !ok {
		return nil, fmt.Errorf("inbox: the transaction in the context is a %T; %s joins only a *sql.Tx", tx, store)
	}
	return sqlTx, nil
}
