package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox/internal/contract"
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
	joined := contract.TxFromContext(ctx)
	if ib.cfg.MaxAttempts > 0 {
		rec.Attempt = newAttemptToken()
	}

	start := time.Now()
	if joined == nil && rec.Position == nil {
		if claim, ok := ib.readFirst(ctx, rec); ok {
			return claim, time.Since(start), nil
		}
	}
	var claim Claim
	var err error
	claim, err = ib.claim(ctx, joined, rec)
	wait := time.Since(start)
	switch {
	case tenantError(err): // refused before anything was written: no attempt to end
		return Claim{}, wait, ib.fail(ctx, rec, msg, OutcomeNoTenant, wait, err)
	case err != nil:
		return Claim{}, wait, contract.Join(ib.fail(ctx, rec, msg, OutcomeFailed, wait, err), ib.endAttempt(ctx, rec))
	case claim.Duplicate: // the store ended the attempt
		if joined == nil && rec.Position == nil {
			ib.recent.add(ctx, rec)
		}
		return claim, wait, nil
	}

	tx := claim.Tx
	if ib.cfg.MaxAttempts > 0 && claim.Unfinished >= ib.cfg.MaxAttempts {
		err := fmt.Errorf("%w: %d attempts started and never finished", ErrTooManyAttempts, claim.Unfinished)
		return Claim{}, wait, contract.Join(ib.fail(ctx, rec, msg, OutcomeTooManyAttempts, wait, err), ib.rollback(ctx, rec, tx))
	}

	ended := false
	defer func() {
		if !ended { // fn panicked: roll back, leaving the attempt to count as a crash, and let the panic go on
			_ = tx.Abandon(ctx)
			ib.observe(ctx, rec, msg, OutcomeFailed, wait, errHandlerPanicked)
		}
	}()
	output, err := fn(contextWithClaim(ContextWithTx(ctx, tx.Handle()), rec))
	ended = true
	if err == nil && len(output) > ib.cfg.MaxOutputBytes {
		err = ib.fail(ctx, rec, msg, OutcomeFailed, wait, fmt.Errorf("%w: the handler's output (produced messages, or a stored result) is %d bytes, more than Config.MaxOutputBytes (%d): produce fewer or smaller messages (or publish them through the outbox), or raise the limit",
			ErrOutputTooLarge, len(output), ib.cfg.MaxOutputBytes))
		return Claim{}, wait, contract.Join(err, ib.rollback(ctx, rec, tx))
	}
	if err != nil {
		ib.observe(ctx, rec, msg, failedOutcome(err), wait, err)
		if rollbackErr := ib.rollback(ctx, rec, tx); rollbackErr != nil {
			err = contract.Join(err, rollbackErr)
		}
		return Claim{}, wait, err
	}
	if ctx.Err() != nil { // no commit on a dead context: pgx would close the connection
		return Claim{}, wait, contract.Join(ib.fail(ctx, rec, msg, OutcomeFailed, wait, context.Cause(ctx)), ib.rollback(ctx, rec, tx))
	}
	if err := tx.Commit(ctx, output); err != nil {
		// The commit may have gone through (a reply lost) or not: the attempt ends either way.
		return Claim{}, wait, contract.Join(ib.fail(ctx, rec, msg, OutcomeFailed, wait, err), tx.Rollback(ctx), ib.endAttempt(ctx, rec))
	}
	if joined != nil { // the owner commits: the inbox's part of the attempt ended cleanly
		if err := ib.endAttempt(ctx, rec); err != nil {
			ib.cfg.Logger.Error("inbox: could not end the attempt of a joined transaction", err, withTenant(ctx, watermill.LogFields{"consumer": rec.Consumer, "key": rec.Key}))
		}
	} else if rec.Position == nil {
		ib.recent.add(ctx, rec)
	}
	ib.observe(ctx, rec, msg, OutcomeProcessed, wait, nil)
	return claim, wait, nil
}

// rollback rolls tx back, ending its attempt (a clean failure); when the rollback
// fails, its attempt's end is not known, and EndAttempt ends it.
func (ib *Inbox) rollback(ctx context.Context, rec Record, tx Tx) error {
	err := tx.Rollback(ctx)
	if err != nil {
		err = contract.Join(err, ib.endAttempt(ctx, rec))
	}
	return err
}

// endAttempt ends rec's attempt when attempts are counted and the store may not have
// ended it: a claim or an end that failed, and beside a joined transaction. Only
// attempts that never end count towards MaxAttempts.
func (ib *Inbox) endAttempt(ctx context.Context, rec Record) error {
	if rec.Attempt == "" {
		return nil
	}
	return ib.cfg.Store.EndAttempt(context.WithoutCancel(ctx), rec)
}

// fail wraps err with the record it concerns and reports the failure with the claim's
// wait (zero when no claim was tried). When the message context ended, that is what the
// error says first: it is why the database call failed, and only a longer deadline
// makes the next delivery succeed; unless its cause wraps ErrContended (a caller that
// bounds the wait on a key itself, inboxhttp's InFlightWait): the key was held too long,
// and the outcome is OutcomeContended. An err that wraps ErrContended is too.
func (ib *Inbox) fail(ctx context.Context, rec Record, msg *message.Message, outcome Outcome, claimWait time.Duration, err error) error {
	what := fmt.Sprintf("consumer %q key %q", rec.Consumer, rec.Key)
	if tenant, ok := TenantFromContext(ctx); ok && msg != nil && errors.Is(err, ErrUnknownTenant) { // name the metadata too
		what = fmt.Sprintf("%s: %s (tenant %s)", messageName(msg), what, tenantOrigin(msg, tenant))
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if !errors.Is(err, cause) {
			err = contract.Join(err, cause)
		}
		if errors.Is(cause, ErrContended) {
			what += fmt.Sprintf(": the caller stopped waiting for the key (%v), so the message is nacked and comes again", cause)
		} else {
			what += fmt.Sprintf(": the message context ended (%v) before the inbox was done, so the message is nacked and comes again"+
				" (processed then, or skipped if its commit went through); if a deadline ended it (watermill-nats AckWaitTimeout,"+
				" a Timeout middleware, a shutdown), give the handler more time than it takes", cause)
		}
	}
	if outcome == OutcomeFailed {
		outcome = failedOutcome(err)
	}
	err = contract.Wrap(what, err)
	ib.observe(ctx, rec, msg, outcome, claimWait, err)
	return err
}

// failedOutcome is the outcome of a failure: OutcomeContended when err wraps
// ErrContended (the key was held too long), OutcomeFailed otherwise.
func failedOutcome(err error) Outcome {
	if errors.Is(err, ErrContended) {
		return OutcomeContended
	}
	return OutcomeFailed
}
