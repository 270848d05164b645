package inboxtest

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrEscaped is returned by CheckOnce when a delivery that the inbox rolled back left the
// handler's effects behind: the handler wrote through something other than the inbox
// transaction, so a redelivery applies those writes again. It is a test's verdict, not a
// message's error (inbox.Permanent reports it transient).
var ErrEscaped = errors.New("inboxtest: the handler's writes escaped the inbox transaction")

// ErrNotApplied is returned by CheckOnce when processing the message changed nothing that
// effects reads, so the check could not tell a correct handler from a broken one. A
// test's verdict, not a message's error (inbox.Permanent reports it transient).
var ErrNotApplied = errors.New("inboxtest: processing the message changed nothing that effects reads")

// CheckOnce checks that h's effects happen once per message behind the inbox middleware
// mw (ib.Middleware), by reading them with effects between three deliveries of msg:
//
//  1. h runs fully, then fails (FailAfter): the inbox rolls back, and effects must read
//     as before. If they do not, the handler wrote outside the inbox transaction —
//     typically a transaction begun on the application's own *sql.DB, *gorm.DB or
//     *bun.DB instead of one bound to inbox.TxFromContext — and CheckOnce returns
//     ErrEscaped: in production such a write is applied again by the redelivery that
//     follows a failure or a crash before the commit.
//  2. h runs and the inbox commits: effects must read differently (else ErrNotApplied).
//  3. The message comes again: the inbox must report a duplicate and effects must read as
//     after step 2.
//
// effects returns the state h changes (a balance, a row count, the rows themselves),
// compared with reflect.DeepEqual. msg must not have been processed before.
func CheckOnce[H Handler](mw message.HandlerMiddleware, h H, msg *message.Message, effects func() (any, error)) error {
	read := func(when string) (any, error) {
		state, err := effects()
		if err != nil {
			return nil, fmt.Errorf("inboxtest: reading the effects %s: %w", when, err)
		}
		return state, nil
	}
	before, err := read("before the first delivery")
	if err != nil {
		return err
	}

	failed := Deliver(mw(FailAfter(1, h)), msg)
	if !errors.Is(failed.Err, ErrInjected) {
		return fmt.Errorf("inboxtest: the first delivery should fail with the injected error, got %v (duplicate %t): deliver a message that was never processed", failed.Err, failed.Duplicate)
	}
	afterFailure, err := read("after the failed delivery")
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(before, afterFailure) {
		return fmt.Errorf("%w: after a delivery the inbox rolled back, the effects read %v instead of %v; write through inbox.TxFromContext (see docs/orm.md)", ErrEscaped, afterFailure, before)
	}

	processed := Deliver(mw(HandlerFunc(h)), msg)
	if processed.Err != nil || processed.Duplicate {
		return fmt.Errorf("inboxtest: the delivery after the failure should be processed, got error %v (duplicate %t)", processed.Err, processed.Duplicate)
	}
	once, err := read("after processing")
	if err != nil {
		return err
	}
	if reflect.DeepEqual(before, once) {
		return fmt.Errorf("%w: they read %v before and after", ErrNotApplied, once)
	}

	again := Deliver(mw(HandlerFunc(h)), msg)
	if again.Err != nil || !again.Duplicate {
		return fmt.Errorf("inboxtest: the redelivery should be a duplicate, got error %v (duplicate %t)", again.Err, again.Duplicate)
	}
	twice, err := read("after the redelivery")
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(once, twice) {
		return fmt.Errorf("%w: the redelivery was skipped, yet the effects went from %v to %v", ErrEscaped, once, twice)
	}
	return nil
}
