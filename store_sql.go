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
// database/sql rolls a transaction back by itself when the context given to BeginTx is
// cancelled, and from then on every call on it fails with sql.ErrTxDone. So ErrTxDone
// while ctx is done means the message context ended and the transaction rolled back; it
// means the handler ended the transaction only while ctx is still live.
type sqlInboxTx struct {
	tx     *sql.Tx
	joined bool
	// setOutput stores the output with the claimed key.
	setOutput func(ctx context.Context, tx *sql.Tx, output []byte) error
	// wrap classifies the database's own errors.
	wrap func(doing string, err error) error
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
	if err := t.tx.Commit(); err != nil {
		return t.ended(ctx, "committing", err)
	}
	return nil
}

func (t *sqlInboxTx) Rollback(context.Context) error {
	if t.joined {
		return nil
	}
	return rollbackSQL(t.tx)
}

// ended classifies an error of a statement on the claimed transaction.
func (t *sqlInboxTx) ended(ctx context.Context, doing string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !t.joined {
		// database/sql rolled the transaction back when ctx ended, or the driver gave up
		// on the statement: either way nothing committed.
		return fmt.Errorf("inbox: %s: the message context ended and the transaction rolled back: %w", doing, errors.Join(ctxErr, err))
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
func claimInNewTx(ctx context.Context, db SQLDB, isolation sql.IsolationLevel, wrap func(doing string, err error) error,
	claim func(tx *sql.Tx) (Claim, error)) (Claim, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: isolation})
	if err != nil {
		return Claim{}, wrap("beginning the transaction", err)
	}
	c, err := claim(tx)
	if err != nil || c.Duplicate {
		err = errors.Join(err, rollbackSQL(tx))
	}
	return c, err
}

// readStoredSQL reads, for a duplicate, what the first delivery of rec stored; query
// selects fingerprint and output by consumer and key.
func readStoredSQL(ctx context.Context, tx *sql.Tx, query string, rec Record, wrap func(doing string, err error) error) (Claim, error) {
	claim := Claim{Duplicate: true}
	if err := tx.QueryRowContext(ctx, query, rec.Consumer, rec.Key).Scan(&claim.Fingerprint, &claim.Output); err != nil {
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
