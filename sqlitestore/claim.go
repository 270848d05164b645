package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/watermill-inbox/inbox"
)

// Claim implements inbox.Store: it begins a transaction of the store's own (through
// this process's gate to the write lock, see begin) and inserts the key first.
func (s *Store) Claim(ctx context.Context, rec inbox.Record) (inbox.Claim, error) {
	w, err := s.begin(ctx, "claiming the key")
	if err != nil {
		return inbox.Claim{}, err
	}
	c, err := s.claim(ctx, w.tx, rec, w)
	if err != nil || c.Duplicate {
		return c, joinErrors(err, w.rollback(ctx))
	}
	return c, nil
}

// ClaimIn implements inbox.Store; tx must be a *sql.Tx on the same database file, from
// any handle. It takes the database's write lock if tx does not hold it yet (begin it
// with _txlock=immediate so that it does from its BEGIN: a deferred transaction that
// read before the claim gets SQLITE_BUSY, as inbox.ErrContended, if another writer
// committed since).
func (s *Store) ClaimIn(ctx context.Context, tx any, rec inbox.Record) (inbox.Claim, error) {
	sqlTx, ok := tx.(*sql.Tx)
	if !ok {
		return inbox.Claim{}, fmt.Errorf("inbox: the transaction in the context is a %T; sqlitestore joins only a *sql.Tx", tx)
	}
	if err := ctx.Err(); err != nil {
		return inbox.Claim{}, fmt.Errorf("inbox: claiming the key: %w", err)
	}
	return s.claim(ctx, sqlTx, rec, nil)
}

// claim inserts rec's key in tx and, only when it was there already, reads what the
// first delivery stored: the insert took the write lock, so that read sees the latest
// commit. own is the store's own transaction, nil for a joined one; for a joined one
// LockTimeout is set and restored around the insert here.
func (s *Store) claim(ctx context.Context, tx *sql.Tx, rec inbox.Record, own *writeTx) (inbox.Claim, error) {
	bound := own
	if own == nil && s.cfg.LockTimeout > 0 {
		bound = &writeTx{}
		if err := tx.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&bound.saved); err != nil {
			return inbox.Claim{}, s.wrap("reading busy_timeout", err)
		}
		left := s.cfg.LockTimeout
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < left {
			left = time.Until(deadline)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, max(1, left.Milliseconds()))); err != nil {
			return inbox.Claim{}, joinErrors(s.wrap("setting busy_timeout", err), bound.restore(ctx, tx))
		}
	}
	res, err := tx.ExecContext(ctx, s.sql.insert, rec.Consumer, rec.Key, now(), rec.Fingerprint)
	if bound != nil {
		if restoreErr := bound.restore(ctx, tx); restoreErr != nil && err == nil {
			return inbox.Claim{}, s.wrap("restoring busy_timeout", restoreErr)
		}
	}
	if err != nil {
		return inbox.Claim{}, s.wrap("inserting the key", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return inbox.Claim{}, s.wrap("inserting the key", err)
	}
	if n == 1 {
		return inbox.Claim{Tx: &inboxTx{s: s, tx: tx, rec: rec, own: own}}, nil
	}
	c := inbox.Claim{Duplicate: true}
	if err := tx.QueryRowContext(ctx, s.sql.stored, rec.Consumer, rec.Key).Scan(&c.Fingerprint, &c.Output); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return inbox.Claim{}, fmt.Errorf("inbox: the key vanished while being claimed: %w", inbox.ErrContended)
		}
		return inbox.Claim{}, s.wrap("reading the stored key", err)
	}
	return c, nil
}

// inboxTx is the transaction of a claimed key.
//
// A transaction the store began does not end when ctx does (see begin), so ErrTxDone
// on it means the handler ended it. A joined transaction ends when its owner's context
// does: ErrTxDone while ctx is done means that.
type inboxTx struct {
	s   *Store
	tx  *sql.Tx
	rec inbox.Record
	own *writeTx // nil for a joined transaction
}

// Handle implements inbox.Tx: the *sql.Tx.
func (t *inboxTx) Handle() any { return t.tx }

// Commit implements inbox.Tx.
func (t *inboxTx) Commit(ctx context.Context, output []byte) error {
	if output != nil {
		if _, err := t.tx.ExecContext(ctx, t.s.sql.setOutput, output, t.rec.Consumer, t.rec.Key); err != nil {
			return t.ended(ctx, "storing the produced messages", err)
		}
	}
	if t.own == nil {
		return nil
	}
	defer t.own.release()
	if err := t.tx.Commit(); err != nil {
		return t.ended(ctx, "committing", err)
	}
	return nil
}

// Rollback implements inbox.Tx. (*sql.Tx).Rollback takes no context, so a cancelled
// message context cannot stop it.
func (t *inboxTx) Rollback(ctx context.Context) error {
	if t.own == nil {
		return nil
	}
	return t.own.rollback(ctx)
}

// ended classifies an error of a statement on the claimed transaction.
func (t *inboxTx) ended(ctx context.Context, doing string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The statement did not run, or the driver interrupted it: nothing committed.
		return fmt.Errorf("inbox: %s: %w", doing, joinErrors(ctxErr, err))
	}
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("inbox: %s: %w", doing, inbox.ErrTxDone)
	}
	return t.s.wrap(doing, err)
}

// joinErrors joins the non-nil errors with "; ", the later ones without their "inbox: "
// prefix, so the message says it once; it wraps them all.
func joinErrors(errs ...error) error {
	var kept []error
	var msg []string
	for _, err := range errs {
		if err == nil {
			continue
		}
		text := err.Error()
		if len(kept) > 0 {
			text = strings.TrimPrefix(text, "inbox: ")
		}
		kept = append(kept, err)
		msg = append(msg, text)
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return &joined{msg: strings.Join(msg, "; "), errs: kept}
}

type joined struct {
	msg  string
	errs []error
}

func (e *joined) Error() string   { return e.msg }
func (e *joined) Unwrap() []error { return e.errs }
