package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// inboxTx is the transaction of a claimed key.
//
// A transaction the store began does not end when ctx does (see lease.begin), so
// ErrTxDone on it means the handler ended it. A joined transaction ends when its
// owner's context does: ErrTxDone while ctx is done means that.
type inboxTx struct {
	s   *Store
	tx  *sql.Tx
	rec contract.Record
	// lease is the store's turn at the write lock and its connection, released when the
	// transaction ends; nil for a joined transaction.
	lease *lease
	// setOutput stores the produced messages; nil: with rec's key. Offset mode stores
	// them with a partition's row.
	setOutput func(ctx context.Context, tx *sql.Tx, output []byte) error
}

// Handle implements inbox.Tx: the *sql.Tx.
func (t *inboxTx) Handle() any { return t.tx }

// Commit implements inbox.Tx: the output is stored and the attempt's row deleted in
// the key's transaction, which then commits.
func (t *inboxTx) Commit(ctx context.Context, output []byte) error {
	if output != nil {
		set := t.setOutput
		if set == nil {
			set = func(ctx context.Context, tx *sql.Tx, output []byte) error {
				_, err := tx.ExecContext(ctx, t.s.sql.setOutput, output, t.rec.Consumer, t.rec.Key)
				return err
			}
		}
		if err := set(ctx, t.tx, output); err != nil {
			return t.ended(ctx, "storing the produced messages", err)
		}
	}
	if t.lease == nil {
		return nil
	}
	return t.end(ctx, "committing", nil)
}

// end deletes the attempt's row in the transaction (when there is an attempt) after
// undo, commits, ends the attempt and releases the lease. When it fails, the attempt
// stays pending (see attemptState) and the transaction is rolled back.
func (t *inboxTx) end(ctx context.Context, doing string, undo func() error) error {
	defer t.lease.release()
	err := error(nil)
	if undo != nil {
		err = undo()
	}
	if err == nil && t.rec.Attempt != "" {
		_, err = t.tx.ExecContext(context.WithoutCancel(ctx), t.s.sql.endAttempt, t.rec.Consumer, t.rec.Key, t.rec.Attempt)
	}
	if err == nil {
		err = t.tx.Commit()
	}
	if err != nil {
		t.lease.info.running.pend(t.rec.Attempt)
		return joinErrors(t.ended(ctx, doing, err), rollback(t.tx))
	}
	t.lease.info.running.end(t.rec.Attempt)
	return nil
}

// Rollback implements inbox.Tx: a clean failure. With an attempt, the key and the
// handler's writes are undone to the claim's savepoint and the attempt's row deleted in
// the same transaction, which still holds the write lock; when that cannot be (the
// handler ended the transaction, or SQLite rolled it back after an error), the
// transaction is rolled back and the row deleted in a transaction of its own. It
// does nothing for a joined transaction (never with an attempt on SQLite). (*sql.Tx).Rollback
// takes no context, so a cancelled message context cannot stop it.
func (t *inboxTx) Rollback(ctx context.Context) error {
	if t.lease == nil {
		return nil
	}
	if t.rec.Attempt == "" {
		defer t.lease.release()
		return rollback(t.tx)
	}
	err := t.end(ctx, "rolling back", func() error {
		_, err := t.tx.ExecContext(context.WithoutCancel(ctx), `ROLLBACK TO inbox_claim`)
		return err
	})
	if err == nil {
		return nil
	}
	// The transaction ended without the savepoint: end the attempt on its own.
	return t.s.EndAttempt(ctx, t.rec)
}

// Abandon implements inbox.Tx: rolled back, the attempt's row left to count as a
// crash.
func (t *inboxTx) Abandon(ctx context.Context) error {
	if t.lease == nil {
		return nil
	}
	defer t.lease.release()
	err := rollback(t.tx)
	t.lease.info.running.end(t.rec.Attempt)
	return err
}

// ended classifies an error of a statement on the claimed transaction.
func (t *inboxTx) ended(ctx context.Context, doing string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The statement did not run, or the driver interrupted it: nothing committed.
		return fmt.Errorf("inbox: %s: %w", doing, joinErrors(ctxErr, err))
	}
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("inbox: %s: %w", doing, contract.ErrTxDone)
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

func (e *joined) Error() string { return e.msg }

func (e *joined) Unwrap() []error { return e.errs }
