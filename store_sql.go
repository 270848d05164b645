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
	// release gives back a connection the store held for the transaction, once it
	// ended; nil otherwise.
	release func()
}

func (t *sqlInboxTx) Handle() any { return t.tx }

// Abandon implements Tx: it rolls back (the store counts attempts outside it).
func (t *sqlInboxTx) Abandon(ctx context.Context) error { return t.Rollback(ctx) }

func (t *sqlInboxTx) Commit(ctx context.Context, output []byte) error {
	if output != nil {
		if err := t.setOutput(ctx, t.tx, output); err != nil {
			return t.ended(ctx, "storing the produced messages", err)
		}
	}
	if t.joined {
		return nil
	}
	defer t.done()
	if err := t.tx.Commit(); err != nil {
		return t.ended(ctx, "committing", err)
	}
	return nil
}

func (t *sqlInboxTx) Rollback(context.Context) error {
	if t.joined {
		return nil
	}
	defer t.done()
	return rollbackSQL(t.tx)
}

// done gives back the connection the store held, once.
func (t *sqlInboxTx) done() {
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

// claimInNewTx begins a transaction at isolation and claims the key in it with claim. A
// duplicate or an error ends the transaction; a new key leaves it open in the Claim.
//
// The transaction is begun on a connection taken with ctx, but with ctx's cancellation
// cut off: database/sql would otherwise roll it back by itself, asynchronously, when
// ctx ends, between two statements of the store's (leaving a session setting changed)
// and, for drivers that cannot reset a session, by closing the connection, which kills
// a *sql.Conn handle. The store and the middleware end the transaction on every path;
// a statement still sees ctx, so a cancelled message stops at its next statement.
func claimInNewTx(ctx context.Context, db SQLDB, isolation sql.IsolationLevel, wrap func(doing string, err error) error,
	claim func(tx *sql.Tx) (Claim, error)) (Claim, error) {
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
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), &sql.TxOptions{Isolation: isolation})
	if err != nil {
		release()
		return Claim{}, wrap("beginning the transaction", err)
	}
	c, err := claim(tx)
	if err != nil || c.Duplicate {
		err = join(err, rollbackSQL(tx))
		release()
		return c, err
	}
	c.Tx.(*sqlInboxTx).release = release
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
