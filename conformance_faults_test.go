package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
)

// The fault axis of the conformance suite: every flavour's deliveries run through a
// netfault.Injector that breaks one connection at one step of a delivery (the steps the
// flavour declares: claim, the handler's statement, the stored output, the commit, the
// attempt's start and end, the read of a replay's stored row, the Deduplicator's
// check), either after the server ran the command and before the client read its
// reply, or before the command reached the server; and, for the stored output, between
// it and the COMMIT pipelined after it (netfault.BeforeNext). Then the message is redelivered as a broker would, until it is acked, and the
// ledger must be exact: the effect applied once, the key stored once, the output
// published with the ack (produced, or replayed by a duplicate), and no healthy message
// refused. docs/reliability.md describes the model.

// faultAxisDeliveries bounds the deliveries of one message: two with a fault, a few
// more for what a fault leaves behind (a lock the server frees when it notices the
// broken connection, a deadlock among waiters).
const faultAxisDeliveries = 6

// faultAxisDeliveryTime bounds one delivery, as a broker's ack deadline does: a
// delivery still running then has its context ended, is nacked and comes again. It is
// longer than any wait the servers impose (a lock wait, Vitess's 30 s transaction
// killer), so a delivery meets it only when a server never answers, which the run logs.
const faultAxisDeliveryTime = time.Minute

// faultAxisMaxAttempts is the MaxAttempts of the runs that count attempts: with one
// fault on each of this many deliveries, the next one must still be processed.
const faultAxisMaxAttempts = 2

// errCleanFailure is the error of a handler that fails cleanly: it wrote, then returned
// an error, so the inbox rolls back and the message comes again.
var errCleanFailure = errors.New("the handler failed (on purpose, after writing)")

// faultCase is one run of the axis: faults at step on the first deliveries of one
// message, in mode.
type faultCase struct {
	step        faultStep
	mode        netfault.Mode
	maxAttempts int
	// failing makes the handler fail cleanly in the deliveries that carry a fault, so that
	// those deliveries roll back and end their attempt (attempt-end's step).
	failing bool
	// careless makes the handler ignore its statement's error and return nil, so that the
	// commit meets the broken connection.
	careless bool
	// copies is the number of concurrent deliveries of the message, 1 for none.
	copies int
	// replay processes the message once, without a fault, before the faulted deliveries,
	// which are its replays from another inbox (process), hinted as such
	// (ContextWithReplayHint): they read the stored row before any claim, or in the
	// claim over a store that cannot read first (stepReadStored).
	replay bool
}

func (c faultCase) name() string {
	name := fmt.Sprintf("%s/%v", c.step, c.mode)
	if c.maxAttempts > 0 {
		name += fmt.Sprintf("/MaxAttempts%d", c.maxAttempts)
	}
	if c.failing {
		name += "/HandlerFails"
	}
	if c.careless {
		name += "/HandlerIgnoresItsError"
	}
	if c.copies > 1 {
		name += fmt.Sprintf("/%dConcurrentCopies", c.copies)
	}
	if c.replay {
		name += "/HintedReplay"
	}
	return name
}

// faultCases returns the runs for a store with steps.
func faultCases(steps map[faultStep]netfault.Step) []faultCase {
	var cases []faultCase
	add := func(c faultCase) {
		if _, ok := steps[c.step]; ok {
			cases = append(cases, c)
		}
	}
	for _, mode := range []netfault.Mode{netfault.AfterReply, netfault.BeforeSend} {
		for _, step := range []faultStep{stepClaim, stepHandler, stepOutput, stepCommit} {
			add(faultCase{step: step, mode: mode, copies: 1})
			add(faultCase{step: step, mode: mode, maxAttempts: faultAxisMaxAttempts, copies: 1})
		}
		for _, step := range []faultStep{stepClaim, stepHandler, stepAttemptStart, stepAttemptEnd} {
			add(faultCase{step: step, mode: mode, maxAttempts: faultAxisMaxAttempts, failing: true, copies: 1})
		}
		add(faultCase{step: stepAttemptStart, mode: mode, maxAttempts: faultAxisMaxAttempts, copies: 1})
		add(faultCase{step: stepHandler, mode: mode, careless: true, copies: 1})
		for _, step := range []faultStep{stepClaim, stepHandler, stepOutput, stepCommit, stepAttemptStart} {
			add(faultCase{step: step, mode: mode, maxAttempts: faultAxisMaxAttempts, copies: 3})
		}
		add(faultCase{step: stepReadStored, mode: mode, copies: 1, replay: true})
		add(faultCase{step: stepReadStored, mode: mode, maxAttempts: faultAxisMaxAttempts, copies: 1, replay: true})
		add(faultCase{step: stepReadStored, mode: mode, copies: 3, replay: true})
	}
	// The folded step: the stored output's UPDATE reaches the server and its COMMIT never
	// does, though pgx sends them in one pipeline (the connection ends between the two;
	// on the stores that send them apart, after the UPDATE ran). The output must never be
	// committed without the handler's writes, nor the reverse (issue 31).
	add(faultCase{step: stepOutput, mode: netfault.BeforeNext, copies: 1})
	add(faultCase{step: stepOutput, mode: netfault.BeforeNext, maxAttempts: faultAxisMaxAttempts, copies: 1})
	add(faultCase{step: stepOutput, mode: netfault.BeforeNext, maxAttempts: faultAxisMaxAttempts, copies: 3})
	return cases
}

// exerciseFaultAxis runs the fault axis on f: one fixture, its cases one after the
// other, each on a consumer of its own.
func exerciseFaultAxis(t *testing.T, f storeFlavour) {
	t.Run("NetworkFaults", func(t *testing.T) {
		if f.caps.noNetwork {
			t.Skip("the store has no network connection to break")
		}
		t.Parallel()
		fx := f.open(t, storeOpts{faults: true})
		require.NotNil(t, fx.faults, "the flavour ignored storeOpts.faults: dial its connections through a netfault.Injector and declare its steps (flavours_faults_test.go)")
		require.NotEmpty(t, fx.faults.steps, "the flavour declares no fault steps")
		if f.caps.attemptsRefused {
			t.Run("MaxAttemptsRefused", func(t *testing.T) { f.skipRefusedAttempts(t, fx.store) })
		}
		for i, c := range faultCases(fx.faults.steps) {
			if c.maxAttempts > 0 && f.caps.attemptsRefused {
				continue // refused behind the pooler: MaxAttemptsRefused checked it
			}
			t.Run(c.name(), func(t *testing.T) {
				r := &faultRun{t: t, f: f, fx: fx, c: c, consumer: fmt.Sprint("axis-", i), key: fmt.Sprint("order-", i)}
				r.run()
			})
		}
		if fx.faults.dedup != nil {
			for _, mode := range []netfault.Mode{netfault.AfterReply, netfault.BeforeSend} {
				t.Run(fmt.Sprintf("%s/%v", stepDedup, mode), func(t *testing.T) { dedupUnderFault(t, fx, mode) })
			}
		}
		require.NoError(t, fx.faults.inj.Err(), "a connection the injector could not follow")
	})
}

// faultRun delivers one message of a faultCase.
type faultRun struct {
	t             *testing.T
	f             storeFlavour // its tenant, if any, goes in each delivery's context and metadata
	fx            fixture
	c             faultCase
	consumer, key string

	calls atomic.Int32 // handler calls
}

// deliver runs the message through an inbox over store, as a Router would; fails says
// whether the handler fails cleanly this time.
func (r *faultRun) deliver(ib *inbox.Inbox, fails bool) (out []*message.Message, dup bool, err error) {
	ctx, cancel := context.WithTimeout(r.f.context(), faultAxisDeliveryTime)
	defer cancel()
	defer func() {
		if ctx.Err() != nil {
			r.t.Logf("a delivery ran past its %v deadline (a server did not answer): nacked, it comes again: %v", faultAxisDeliveryTime, err)
		}
	}()
	if r.c.replay {
		ctx = inbox.ContextWithReplayHint(ctx)
	}
	msg := r.f.message(r.key, []byte(`{"amount":1}`))
	msg.SetContext(ctx)
	out, err = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		r.calls.Add(1)
		if err := r.fx.ledger.credit(msg.Context(), 1); err != nil && !r.c.careless {
			return nil, err
		}
		if fails {
			return nil, errCleanFailure
		}
		return []*message.Message{message.NewMessage("receipt-"+r.key, []byte("receipt"))}, nil
	})(msg)
	return out, msg.Metadata.Get(inbox.MetadataDuplicate) == "true", err
}

func (r *faultRun) inbox(store inbox.Store) *inbox.Inbox {
	return newTestInbox(r.t, store, inbox.Config{Consumer: r.consumer, MaxAttempts: r.c.maxAttempts})
}

// untilAcked delivers the message through ib until it is acked, with a fault armed on
// each of the first faulted deliveries; it sends the faults that struck to faults.
func (r *faultRun) untilAcked(ib *inbox.Inbox, copyN int, faulted int, faults chan<- *netfault.Fault) []*message.Message {
	step := r.fx.faults.steps[r.c.step]
	for delivery := 1; ; delivery++ {
		if delivery > faultAxisDeliveries {
			r.t.Errorf("copy %d: still not acked after %d deliveries", copyN, faultAxisDeliveries)
			return nil
		}
		var f *netfault.Fault
		if delivery <= faulted {
			f = r.fx.faults.inj.Arm(step, r.c.mode)
		}
		out, dup, err := r.deliver(ib, f != nil && r.c.failing)
		if f != nil {
			if !r.fx.faults.inj.Disarm(f) { // it struck
				faults <- f
			} else if delivery == 1 {
				r.t.Errorf("the fault never struck: no command matched step %s (%v)", r.c.step, r.fx.faults.inj.Err())
				return nil
			}
		}
		switch {
		case errors.Is(err, inbox.ErrTooManyAttempts):
			r.t.Errorf("copy %d, delivery %d: a healthy message refused: %v", copyN, delivery, err)
			return nil
		case errors.Is(err, inbox.ErrTxDone):
			r.t.Errorf("copy %d, delivery %d: a broken connection reported as a handler that ended the transaction: %v", copyN, delivery, err)
			return nil
		}
		if err == nil {
			r.t.Logf("copy %d: acked at delivery %d (duplicate: %v)", copyN, delivery, dup)
			return out
		}
		r.t.Logf("copy %d: delivery %d nacked: %v", copyN, delivery, err)
	}
}

func (r *faultRun) run() {
	t := r.t
	_, creditsBefore := r.fx.ledger.balance(t)
	if r.c.replay { // processed once by another inbox: the faulted deliveries are replays
		_, dup, err := r.deliver(r.inbox(r.fx.store), false)
		require.NoError(t, err)
		require.False(t, dup)
	}
	faults := make(chan *netfault.Fault, r.c.copies*faultAxisDeliveries)
	outs := make([][]*message.Message, r.c.copies)
	if r.c.copies == 1 {
		outs[0] = r.untilAcked(r.inbox(r.fx.store), 0, faultAxisMaxAttempts, faults)
	} else {
		// One fault, on whichever copy sends the step first; the copies run at once, each
		// redelivered until acked.
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range outs {
			store := r.fx.store
			if i > 0 {
				store = r.fx.peer(t)
			}
			ib := r.inbox(store)
			wg.Go(func() {
				<-start
				outs[i] = r.untilAcked(ib, i, 0, faults)
			})
		}
		f := r.fx.faults.inj.Arm(r.fx.faults.steps[r.c.step], r.c.mode)
		close(start)
		wg.Wait()
		if !r.fx.faults.inj.Disarm(f) {
			faults <- f
		}
	}
	close(faults)
	struck := 0
	for f := range faults {
		struck++
		if f.Mode() == netfault.AfterReply {
			require.NoError(t, f.Err(), "the server's reply to %q", f.Command())
		}
	}
	if t.Failed() {
		return
	}
	require.Positive(t, struck, "the fault never struck: no command matched step %s", r.c.step)

	for i, out := range outs {
		require.Len(t, out, 1, "copy %d: the output published with the ack (produced, or replayed by a duplicate)", i)
		require.Equal(t, "receipt-"+r.key, out[0].UUID, "copy %d", i)
		require.Equal(t, []byte("receipt"), []byte(out[0].Payload), "copy %d", i)
	}
	r.requireAppliedOnce(creditsBefore)
}

// requireAppliedOnce checks the ledger and the key, then that one more delivery is a
// duplicate that replays the output without reaching the handler.
func (r *faultRun) requireAppliedOnce(creditsBefore int) {
	t := r.t
	_, credits := r.fx.ledger.balance(t)
	require.Equal(t, 1, credits-creditsBefore, "credits of the message (0: lost; 2 or more: applied twice)")
	require.EqualValues(t, 1, consumerKeys(t, r.f.context(), r.fx.store, r.consumer), "keys stored for the message (of the case's tenant, with one)")
	calls := r.calls.Load()
	out, dup, err := r.deliver(r.inbox(r.fx.store), false)
	require.NoError(t, err)
	require.True(t, dup, "one more delivery is a duplicate")
	require.Len(t, out, 1, "the duplicate replays the output")
	require.Equal(t, calls, r.calls.Load(), "the duplicate reached the handler")
}

// consumerKeys returns how many keys store holds for consumer (in ctx's tenant, with one).
func consumerKeys(t *testing.T, ctx context.Context, store inbox.Store, consumer string) int64 {
	stats, err := store.Stats(ctx)
	require.NoError(t, err)
	for _, s := range stats {
		if s.Consumer == consumer {
			return s.Keys
		}
	}
	return 0
}

// dedupUnderFault runs Watermill's Deduplicator on the store's repository with a fault
// at its check: the message must be processed once, neither dropped (a resent check
// that reports the first check's own key as a duplicate) nor twice.
func dedupUnderFault(t *testing.T, fx fixture, mode netfault.Mode) {
	d := middleware.Deduplicator{
		KeyFactory: middleware.NewMessageHasherFromMetadataField("id"),
		Repository: fx.faults.dedup(t),
		Timeout:    time.Minute,
	}
	var calls atomic.Int32
	h := d.Middleware(func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
	msg := message.NewMessage("dedup-1", nil)
	msg.Metadata.Set("id", tableName("msg"))

	f := fx.faults.inj.Arm(fx.faults.steps[stepDedup], mode)
	for delivery := 1; ; delivery++ {
		require.LessOrEqual(t, delivery, faultAxisDeliveries, "still not acked")
		_, err := h(msg)
		if err == nil {
			break
		}
		t.Logf("delivery %d nacked: %v", delivery, err)
	}
	require.False(t, fx.faults.inj.Disarm(f), "the fault never struck: no command matched step %s", stepDedup)
	if mode == netfault.AfterReply {
		require.NoError(t, f.Err())
	}
	require.EqualValues(t, 1, calls.Load(), "handler calls before the ack (0: the Deduplicator dropped the message)")
	_, err := h(msg)
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load(), "one more delivery within the window is dropped")
}
