package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgxInboxTx is the transaction of a claimed key.
type pgxInboxTx struct {
	tx     pgx.Tx
	store  *PostgresStore
	rec    Record
	joined bool
	// release gives the connection of a folded claim back to its pool once the
	// transaction ended; nil otherwise.
	release func()
	// committed is set once commitWithOutput committed, past tx (which it bypasses).
	committed bool
}

// commitWithOutput stores the output and commits in one round trip, the UPDATE and the
// COMMIT pipelined on the folded claim's connection, where the store owns the
// connection and gives it back itself: tx is bypassed and never used again.
func (t *pgxInboxTx) commitWithOutput(ctx context.Context, output []byte) error {
	defer t.done()
	conn := t.tx.Conn()
	if conn.PgConn().TxStatus() == 'I' { // the handler ended the transaction itself
		_ = rollbackPgx(ctx, t.tx)
		return fmt.Errorf("inbox: storing the produced messages: %w", ErrTxDone)
	}
	batch := &pgx.Batch{}
	batch.Queue(t.store.sql.setOutput, t.rec.Consumer, t.rec.Key, output)
	batch.Queue("commit")
	results := conn.SendBatch(ctx, batch)
	_, err := results.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = results.Exec()
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	if err == nil && tag.String() == "ROLLBACK" { // the transaction had failed
		err = pgx.ErrTxCommitRollback
	}
	if err != nil {
		return join(t.store.wrap("storing the output and committing", err), rollbackPgx(ctx, t.tx))
	}
	t.committed = true
	return nil
}

func (t *pgxInboxTx) Handle() any { return t.tx }

// Abandon implements Tx: it rolls back (the store counts attempts outside it).
func (t *pgxInboxTx) Abandon(ctx context.Context) error { return t.Rollback(ctx) }

func (t *pgxInboxTx) Commit(ctx context.Context, output []byte) error {
	if output != nil && !t.joined && t.release != nil {
		return t.commitWithOutput(ctx, output)
	}
	if output != nil {
		if _, err := t.tx.Exec(ctx, t.store.sql.setOutput, t.rec.Consumer, t.rec.Key, output); err != nil {
			err = t.ended("storing the produced messages", err)
			if t.release != nil { // end it here, so the connection goes back now
				err = join(err, rollbackPgx(ctx, t.tx))
				t.done()
			}
			return err
		}
	}
	if t.joined {
		return nil
	}
	defer t.done()
	if err := t.tx.Commit(ctx); err != nil {
		return t.ended("committing", err)
	}
	return nil
}

func (t *pgxInboxTx) Rollback(ctx context.Context) error {
	if t.joined || t.committed {
		return nil
	}
	defer t.done()
	return rollbackPgx(ctx, t.tx)
}

// done releases the connection of a folded claim, once.
func (t *pgxInboxTx) done() {
	if t.release != nil {
		t.release()
		t.release = nil
	}
}

func (t *pgxInboxTx) ended(doing string, err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("inbox: %s: %w", doing, ErrTxDone)
	}
	return t.store.wrap(doing, err)
}

// rollbackPgx rolls tx back even when ctx is cancelled; a transaction already ended is
// not an error.
func rollbackPgx(ctx context.Context, tx pgx.Tx) error {
	err := tx.Rollback(context.WithoutCancel(ctx))
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("inbox: rolling back: %w", err)
	}
	return nil
}
