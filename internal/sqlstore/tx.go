package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// DB is what the database/sql stores (postgresstore.SQLStore, mysqlstore, sqlitestore) need of a
// database. *sql.DB satisfies it, and so does *sql.Conn (which serves one message at a
// time).
type DB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Attempts is what a database/sql store does for attempts (see attempts.go).
type Attempts interface {
	// start takes rec's lock on conn, the claim's connection, and inserts rec's row,
	// committed.
	Start(ctx context.Context, conn DB, rec contract.Record) error
	// unfinished counts the key's attempts that died, through q: the claim's
	// transaction, which holds the key, when countInTx, a connection of its own
	// otherwise (see countAttempts).
	Unfinished(ctx context.Context, q Queryer, rec contract.Record) (int, error)
	// countInTx reports whether the store's own claim transactions can count: at a
	// level whose reads take a snapshot after the claim's wait and lock nothing.
	CountInTx() bool
	// end deletes rec's row with q: tx, to commit with the key, or conn, after the
	// claim's transaction ended.
	End(ctx context.Context, q Execer, rec contract.Record) error
	// unlock releases rec's lock on conn once its row is gone (or, abandoned, is to
	// stay).
	Unlock(ctx context.Context, conn DB, rec contract.Record) error
	// startJoined starts rec's attempt beside tx, a joined transaction: the lock in tx's
	// session, the row on another connection (attemptDB).
	StartJoined(ctx context.Context, tx *sql.Tx, rec contract.Record) error
	// endJoined ends (end) or abandons rec's attempt beside a joined transaction, which
	// ctx carries: the row deleted on another connection, then the lock released.
	EndJoined(ctx context.Context, rec contract.Record, end bool) error
}

// Queryer is what a *sql.Tx, *sql.DB and *sql.Conn share for a query.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CountAttempts counts rec's key's attempts that died, once the claim in tx holds the
// key: in tx when it is the store's own and att.countInTx, and otherwise outside it, on
// a connection of its own (asideSQL) where each statement is a transaction of its own:
// a joined transaction's, or a REPEATABLE READ or SERIALIZABLE one's, snapshot may
// predate the claim's wait, and an InnoDB SERIALIZABLE read locks what it reads.
func CountAttempts(ctx context.Context, att Attempts, db DB, tx *sql.Tx, joined bool, rec contract.Record,
	wrap func(doing string, err error) error) (int, error) {
	if !joined && att.CountInTx() {
		n, err := att.Unfinished(ctx, tx, rec)
		if err != nil {
			return 0, wrap("counting the attempts", err)
		}
		return n, nil
	}
	aside, release, err := AsideDB(ctx, db)
	if err != nil {
		return 0, err
	}
	defer release()
	n, err := att.Unfinished(ctx, aside, rec)
	if err != nil {
		return 0, wrap("counting the attempts", err)
	}
	return n, nil
}

// Execer is what a *sql.Tx, *sql.DB and *sql.Conn share for a statement.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Tx is the transaction of a claimed key in a database/sql store.
//
// A transaction the store began does not end when ctx does (see claimInNewTx), so
// ErrTxDone on it means the handler ended it. A joined transaction ends when its
// owner's context does: ErrTxDone while ctx is done means that.
type Tx struct {
	SQL    *sql.Tx
	Joined bool
	// SetOutput stores the output with the claimed key.
	SetOutput func(ctx context.Context, tx *sql.Tx, output []byte) error
	// Wrap classifies the database's own errors.
	Wrap func(doing string, err error) error
	// Rec is the claimed record; with an Attempt, att ends it on conn, the claim's
	// connection.
	Rec  contract.Record
	Att  Attempts
	Conn DB
	// Release gives back a connection the store held for the transaction, once it
	// ended; nil otherwise.
	Release  func()
	finished bool
}

func (t *Tx) Handle() any { return t.SQL }

func (t *Tx) Commit(ctx context.Context, output []byte) error {
	if output != nil {
		if err := t.SetOutput(ctx, t.SQL, output); err != nil {
			return t.ended(ctx, "storing the produced messages", err)
		}
	}
	if t.Joined {
		return nil
	}
	attempt := t.Rec.Attempt != ""
	if attempt {
		if err := t.Att.End(ctx, t.SQL, t.Rec); err != nil {
			return t.ended(ctx, "ending the attempt", err)
		}
	}
	defer t.done()
	if err := t.SQL.Commit(); err != nil {
		err = t.ended(ctx, "committing", err)
		if attempt { // rolled back, or not known: a clean end, or EndAttempt's
			err = contract.Join(err, t.endOnConn(ctx, true))
		}
		return err
	}
	if attempt { // its row went with the key; a failure here is a connection that broke
		_ = t.Att.Unlock(ctx, t.Conn, t.Rec)
	}
	return nil
}

func (t *Tx) Rollback(ctx context.Context) error { return t.rollback(ctx, true) }

func (t *Tx) Abandon(ctx context.Context) error { return t.rollback(ctx, false) }

func (t *Tx) rollback(ctx context.Context, end bool) error {
	if t.finished {
		return nil
	}
	if t.Joined { // the owner rolls back: only the attempt ends here
		t.finished = true
		if t.Rec.Attempt == "" {
			return nil
		}
		return t.Att.EndJoined(ctx, t.Rec, end)
	}
	defer t.done()
	err := Rollback(t.SQL)
	if t.Rec.Attempt != "" {
		err = contract.Join(err, t.endOnConn(ctx, end))
	}
	return err
}

// endOnConn ends (end) or abandons the attempt after the claim's transaction ended: the
// row deleted, then the lock released, on the claim's connection.
func (t *Tx) endOnConn(ctx context.Context, end bool) error {
	return EndAttempt(ctx, t.Att, t.Conn, t.Rec, end, t.Wrap)
}

// EndAttempt deletes rec's row on conn when end is set, then releases rec's lock, with
// a context that cannot be cancelled.
func EndAttempt(ctx context.Context, att Attempts, conn DB, rec contract.Record, end bool, wrap func(doing string, err error) error) error {
	ctx = context.WithoutCancel(ctx)
	if end {
		if err := att.End(ctx, conn, rec); err != nil {
			return contract.Join(wrap("ending the attempt", err), att.Unlock(ctx, conn, rec))
		}
	}
	if err := att.Unlock(ctx, conn, rec); err != nil {
		return wrap("releasing the attempt's lock", err)
	}
	return nil
}

// done gives back the connection the store held, once.
func (t *Tx) done() {
	t.finished = true
	if t.Release != nil {
		t.Release()
		t.Release = nil
	}
}

// ended classifies an error of a statement on the claimed transaction.
func (t *Tx) ended(ctx context.Context, doing string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The statement did not run, or the driver gave up on it: nothing committed.
		return fmt.Errorf("inbox: %s: %w", doing, contract.Join(ctxErr, err))
	}
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("inbox: %s: %w", doing, contract.ErrTxDone)
	}
	return t.Wrap(doing, err)
}

// Rollback rolls tx back; a transaction already ended is not an error. (*sql.Tx).Rollback
// takes no context, so a cancelled message context cannot stop it.
func Rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("inbox: rolling back: %w", err)
	}
	return nil
}

// ClaimInNewTx begins a transaction at isolation and claims rec's key in it with claim,
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
func ClaimInNewTx(ctx context.Context, db DB, isolation sql.IsolationLevel, wrap func(doing string, err error) error,
	rec contract.Record, att Attempts, claim func(tx *sql.Tx) (contract.Claim, error)) (contract.Claim, error) {
	conn, release := db, func() {}
	if pool, ok := db.(*sql.DB); ok {
		c, err := pool.Conn(ctx)
		if err != nil {
			return contract.Claim{}, wrap("acquiring a connection", err)
		}
		conn, release = c, func() { _ = c.Close() }
	} else if err := ctx.Err(); err != nil {
		return contract.Claim{}, wrap("beginning the transaction", err)
	}
	attempt := rec.Attempt != ""
	if attempt {
		if err := att.Start(ctx, conn, rec); err != nil {
			err = contract.Join(wrap("starting the attempt", err), EndAttempt(ctx, att, conn, rec, true, wrap))
			release()
			return contract.Claim{}, err
		}
	}
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), &sql.TxOptions{Isolation: isolation})
	if err != nil {
		err = wrap("beginning the transaction", err)
		if attempt {
			err = contract.Join(err, EndAttempt(ctx, att, conn, rec, true, wrap))
		}
		release()
		return contract.Claim{}, err
	}
	c, err := claim(tx)
	if err == nil && !c.Duplicate && attempt {
		c.Unfinished, err = CountAttempts(ctx, att, db, tx, false, rec, wrap)
	}
	if err != nil || c.Duplicate {
		err = contract.Join(err, Rollback(tx))
		if attempt { // a duplicate, or a claim that failed cleanly: its attempt ends
			err = contract.Join(err, EndAttempt(ctx, att, conn, rec, true, wrap))
		}
		release()
		if err != nil {
			return contract.Claim{}, err
		}
		return c, nil
	}
	t := c.Tx.(*Tx)
	t.Release, t.Conn, t.Rec, t.Att = release, conn, rec, att
	return c, nil
}

// ClaimJoined claims rec's key in tx, a transaction the caller began, with claim,
// starting rec's attempt beside it first.
func ClaimJoined(ctx context.Context, db DB, tx *sql.Tx, rec contract.Record, att Attempts, wrap func(doing string, err error) error,
	claim func(tx *sql.Tx) (contract.Claim, error)) (contract.Claim, error) {
	attempt := rec.Attempt != ""
	if attempt {
		if err := att.StartJoined(ctx, tx, rec); err != nil {
			return contract.Claim{}, contract.Join(err, att.EndJoined(ctx, rec, true))
		}
	}
	c, err := claim(tx)
	if err == nil && !c.Duplicate && attempt {
		c.Unfinished, err = CountAttempts(ctx, att, db, tx, true, rec, wrap)
	}
	if attempt && (err != nil || c.Duplicate) {
		err = contract.Join(err, att.EndJoined(ctx, rec, true))
	}
	if err != nil {
		return contract.Claim{}, err
	}
	if t, ok := c.Tx.(*Tx); ok {
		t.Rec, t.Att = rec, att
	}
	return c, nil
}

// ReadStored reads, for a duplicate, what the first delivery of rec stored; query
// selects fingerprint and output by consumer and key: its text, or a *sql.Stmt of tx.
func ReadStored(ctx context.Context, tx *sql.Tx, query any, rec contract.Record, wrap func(doing string, err error) error) (contract.Claim, error) {
	claim := contract.Claim{Duplicate: true}
	var row *sql.Row
	switch q := query.(type) {
	case *sql.Stmt:
		row = q.QueryRowContext(ctx, rec.Consumer, rec.Key)
	default:
		row = tx.QueryRowContext(ctx, q.(string), rec.Consumer, rec.Key)
	}
	if err := row.Scan(&claim.Fingerprint, &claim.Output); err != nil {
		if errors.Is(err, sql.ErrNoRows) { // deleted (Forget, purge) since the insert
			return contract.Claim{}, fmt.Errorf("inbox: the key vanished while being claimed: %w", contract.ErrContended)
		}
		return contract.Claim{}, wrap("reading the stored key", err)
	}
	return claim, nil
}

// JoinedTx returns tx as a *sql.Tx, for ClaimIn.
func JoinedTx(tx any, store string) (*sql.Tx, error) {
	sqlTx, ok := tx.(*sql.Tx)
	if !ok {
		return nil, fmt.Errorf("inbox: the transaction in the context is a %T; %s joins only a *sql.Tx", tx, store)
	}
	return sqlTx, nil
}
