package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// process claims rec's key and, when it is new, runs fn in the claimed transaction and
// commits what fn returns as the stored output. It returns how long the claim took, and
// fn's error unchanged. msg, nil for Process, is the message observations concern.
func (ib *Inbox) process(ctx context.Context, rec Record, msg *message.Message, fn func(ctx context.Context) ([]byte, error)) (Claim, time.Duration, error) {
	// Nothing is sent on a context that already ended: pgx, and its database/sql driver,
	// close the connection of a statement whose context is done, which kills a *pgx.Conn
	// or *sql.Conn handle for every later message.
	if err := ctx.Err(); err != nil {
		return Claim{}, 0, ib.fail(ctx, rec, msg, OutcomeFailed, 0, context.Cause(ctx))
	}
	joined := txFromContext(ctx)
	unfinished := 0
	if ib.cfg.MaxAttempts > 0 {
		var err error
		if unfinished, err = ib.cfg.Store.StartAttempt(ctx, rec.Consumer, rec.Key); err != nil {
			return Claim{}, 0, ib.fail(ctx, rec, msg, OutcomeFailed, 0, err)
		}
	}

	start := time.Now()
	var claim Claim
	var err error
	claim, err = ib.claim(ctx, joined, rec)
	wait := time.Since(start)
	switch {
	case errors.Is(err, ErrContended):
		return Claim{}, wait, join(ib.fail(ctx, rec, msg, OutcomeContended, wait, err), ib.endAttempt(ctx, rec))
	case err != nil:
		return Claim{}, wait, join(ib.fail(ctx, rec, msg, OutcomeFailed, wait, err), ib.endAttempt(ctx, rec))
	case claim.Duplicate:
		return claim, wait, nil
	}

	tx := claim.Tx
	if ib.cfg.MaxAttempts > 0 && unfinished >= ib.cfg.MaxAttempts {
		err := fmt.Errorf("%w: %d attempts started and never finished", ErrTooManyAttempts, unfinished)
		return Claim{}, wait, join(ib.fail(ctx, rec, msg, OutcomeTooManyAttempts, wait, err), tx.Rollback(ctx), ib.endAttempt(ctx, rec))
	}

	ended := false
	defer func() {
		if !ended { // fn panicked: roll back and let the panic go on
			_ = tx.Rollback(ctx)
			ib.observe(ctx, rec, msg, OutcomeFailed, wait, errHandlerPanicked)
		}
	}()
	output, err := fn(ContextWithTx(ctx, tx.Handle()))
	ended = true
	if err == nil && len(output) > ib.cfg.MaxOutputBytes {
		err = ib.fail(ctx, rec, msg, OutcomeFailed, wait, fmt.Errorf("%w: the handler's output (produced messages, or a stored result) is %d bytes, more than Config.MaxOutputBytes (%d): produce fewer or smaller messages (or publish them through the outbox), or raise the limit",
			ErrOutputTooLarge, len(output), ib.cfg.MaxOutputBytes))
		return Claim{}, wait, join(err, tx.Rollback(ctx), ib.endAttempt(ctx, rec))
	}
	if err != nil {
		ib.observe(ctx, rec, msg, OutcomeFailed, wait, err)
		rollbackErr := tx.Rollback(ctx)
		endErr := ib.endAttempt(ctx, rec)
		if rollbackErr != nil || endErr != nil {
			err = join(err, rollbackErr, endErr)
		}
		return Claim{}, wait, err
	}
	if ctx.Err() != nil { // no commit on a dead context: pgx would close the connection
		return Claim{}, wait, join(ib.fail(ctx, rec, msg, OutcomeFailed, wait, context.Cause(ctx)), tx.Rollback(ctx), ib.endAttempt(ctx, rec))
	}
	if err := tx.Commit(ctx, output); err != nil {
		return Claim{}, wait, join(ib.fail(ctx, rec, msg, OutcomeFailed, wait, err), tx.Rollback(ctx), ib.endAttempt(ctx, rec))
	}
	if joined != nil { // the owner commits: the inbox's part of the attempt ended cleanly
		if err := ib.endAttempt(ctx, rec); err != nil {
			ib.cfg.Logger.Error("inbox: could not end the attempt of a joined transaction", err, watermill.LogFields{"consumer": rec.Consumer, "key": rec.Key})
		}
	}
	ib.observe(ctx, rec, msg, OutcomeProcessed, wait, nil)
	return claim, wait, nil
}

// endAttempt records, when attempts are counted, that an attempt ended without a commit
// but without crashing the process: the handler failed, or the claim or the commit did.
// Only attempts that never end count towards MaxAttempts.
func (ib *Inbox) endAttempt(ctx context.Context, rec Record) error {
	if ib.cfg.MaxAttempts == 0 {
		return nil
	}
	return ib.cfg.Store.EndAttempt(context.WithoutCancel(ctx), rec.Consumer, rec.Key)
}

// fail wraps err with the record it concerns and reports the failure with the claim's
// wait (zero when no claim was tried). When the message context ended, that is what the
// error says first: it is why the database call failed, and only a longer deadline
// makes the next delivery succeed.
func (ib *Inbox) fail(ctx context.Context, rec Record, msg *message.Message, outcome Outcome, claimWait time.Duration, err error) error {
	what := fmt.Sprintf("consumer %q key %q", rec.Consumer, rec.Key)
	if ctxErr := ctx.Err(); ctxErr != nil {
		if !errors.Is(err, ctxErr) {
			err = join(err, ctxErr)
		}
		what += fmt.Sprintf(": the message context ended (%v) before the inbox was done, so the message is nacked and comes again"+
			" (processed then, or skipped if its commit went through); if a deadline ended it (watermill-nats AckWaitTimeout,"+
			" a Timeout middleware, a shutdown), give the handler more time than it takes", ctxErr)
	}
	err = wrap(what, err)
	ib.observe(ctx, rec, msg, outcome, claimWait, err)
	return err
}
