package postgresstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// pgxInboxTx is the transaction of a claimed key.
type pgxInboxTx struct {
	tx     pgx.Tx
	store  *Store
	rec    contract.Record
	joined bool
	// release gives the connection the store holds for the transaction (a folded claim,
	// an attempt's) back once the transaction ended; nil otherwise.
	release func()
	// finished is set once the transaction ended through the store (done).
	finished bool
}

// commitBatch stores the output, deletes the attempt's row, commits and then releases
// the attempt's lock, in one round trip, the statements pipelined on the connection the
// store holds and gives back itself: tx is bypassed and never used again. The lock goes
// only after the commit: should the commit fail, the row is still there, and a crash
// is all it may then look like.
func (t *pgxInboxTx) commitBatch(ctx context.Context, output []byte) error {
	defer t.done()
	conn := t.tx.Conn()
	if conn.PgConn().TxStatus() == 'I' { // the handler ended the transaction itself
		err := fmt.Errorf("inbox: storing the produced messages: %w", contract.ErrTxDone)
		if t.rec.Attempt != "" {
			return contract.Join(err, t.store.releasePgx(ctx, conn, t.rec, true))
		}
		return contract.Join(err, rollbackPgx(ctx, t.tx))
	}
	batch := &pgx.Batch{}
	if output != nil {
		batch.Queue(t.store.sql.setOutput, t.rec.Consumer, t.rec.Key, output)
	}
	if t.rec.Attempt != "" {
		batch.Queue(t.store.sql.attempts.end, t.rec.Consumer, t.rec.Key, t.rec.Attempt)
	}
	commitAt := batch.Len()
	batch.Queue("commit")
	if t.rec.Attempt != "" {
		batch.Queue(t.store.sql.attempts.unlock, t.rec.Attempt)
	}
	results := conn.SendBatch(ctx, batch)
	var tag pgconn.CommandTag
	var err error
	for i := 0; i <= commitAt && err == nil; i++ {
		tag, err = results.Exec()
	}
	// After a commit, the unlock's failure (a connection that broke, which took the
	// lock with it) changes nothing: the row went with the key.
	if closeErr := results.Close(); err == nil && tag.String() != "COMMIT" {
		err = closeErr
	}
	if err == nil && tag.String() == "ROLLBACK" { // the transaction had failed
		err = pgx.ErrTxCommitRollback
	}
	if err != nil {
		err = t.store.wrap("storing the output and committing", err)
		if t.rec.Attempt != "" { // rolled back, or not known: a clean end, or EndAttempt's
			return contract.Join(err, t.store.releasePgx(ctx, conn, t.rec, true))
		}
		return contract.Join(err, rollbackPgx(ctx, t.tx))
	}
	return nil
}

func (t *pgxInboxTx) Handle() any { return t.tx }

func (t *pgxInboxTx) Commit(ctx context.Context, output []byte) error {
	if !t.joined && t.release != nil && (output != nil || t.rec.Attempt != "") {
		return t.commitBatch(ctx, output)
	}
	if output != nil { // a joined transaction, or one the store does not hold a connection of
		if _, err := t.tx.Exec(ctx, t.store.sql.setOutput, t.rec.Consumer, t.rec.Key, output); err != nil {
			return t.ended("storing the produced messages", err)
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

func (t *pgxInboxTx) Rollback(ctx context.Context) error { return t.rollback(ctx, true) }

func (t *pgxInboxTx) Abandon(ctx context.Context) error { return t.rollback(ctx, false) }

// rollback rolls back a transaction the store began; with an attempt, it ends it (end),
// or leaves it to count as a crash, and releases its lock, in the same round trip.
func (t *pgxInboxTx) rollback(ctx context.Context, end bool) error {
	if t.finished {
		return nil // nothing of the store's is open
	}
	if t.joined { // the owner rolls back: only the attempt ends here (its lock is the owner's)
		t.finished = true
		if !end || t.rec.Attempt == "" {
			return nil
		}
		return t.store.EndAttempt(ctx, t.rec)
	}
	defer t.done()
	if t.rec.Attempt != "" {
		return t.store.releasePgx(ctx, t.tx.Conn(), t.rec, end)
	}
	return rollbackPgx(ctx, t.tx)
}

// done gives back the connection the store holds, once.
func (t *pgxInboxTx) done() {
	t.finished = true
	if t.release != nil {
		t.release()
		t.release = nil
	}
}

func (t *pgxInboxTx) ended(doing string, err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("inbox: %s: %w", doing, contract.ErrTxDone)
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
