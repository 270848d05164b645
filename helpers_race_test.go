package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The conformance cases about concurrent deliveries share one shape: a first claim is
// held inside its handler, its keys claimed and its transaction open, while rivals claim
// the same keys from other handles; then the first commits or rolls back, and what the
// rivals were told shows whether they waited for it.

// heldClaim is a claim whose handler is running, held until it is ended.
type heldClaim struct {
	release func() // lets the handler return; idempotent
	done    chan error
}

// holdClaim runs claim in a goroutine and returns once claim's handler has called the
// hold func it is given. hold blocks until the claim is ended (end, raceHeld, or the
// test's end, so that a failed test leaves no transaction open), then returns nil if
// commit is set and an error if not: the handler returns it, to commit or roll back.
func holdClaim(t *testing.T, commit bool, claim func(hold func() error) error) *heldClaim {
	t.Helper()
	entered, released := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := &heldClaim{release: func() { once.Do(func() { close(released) }) }, done: make(chan error, 1)}
	t.Cleanup(h.release)
	go func() {
		h.done <- claim(func() error {
			close(entered)
			<-released
			if !commit {
				return errors.New("the first delivery fails")
			}
			return nil
		})
	}()
	select {
	case <-entered:
	case err := <-h.done:
		t.Fatalf("the first claim returned before its handler ran: %v", err)
	}
	return h
}

// holdCredit holds a claim of key for consumer "billing" by ib.Process, whose handler
// credits amount to l, then is held (holdClaim).
func holdCredit(ctx context.Context, t *testing.T, ib *inbox.Inbox, l ledger, key string, amount int, commit bool) *heldClaim {
	t.Helper()
	return holdClaim(t, commit, func(hold func() error) error {
		_, err := ib.Process(ctx, "billing", key, func(ctx context.Context) error {
			if err := l.credit(ctx, amount); err != nil {
				return err
			}
			return hold()
		})
		return err
	})
}

// end lets the held claim's handler return, and returns the claim's error.
func (h *heldClaim) end() error {
	h.release()
	return <-h.done
}

// outcome is what one rival claim returned.
type outcome[V any] struct {
	got V
	err error
}

// raceHeld runs each rival in a goroutine of its own while h is held, for 300 ms; then
// it ends h and, once every rival returned, returns their outcomes, in rivals' order,
// and h's error. With mustWait set, a rival that returns within the 300 ms fails the
// test with mustWait as the message: it did not wait for the held transaction.
func raceHeld[V any](t *testing.T, h *heldClaim, mustWait string, rivals ...func() (V, error)) ([]outcome[V], error) {
	t.Helper()
	out := make([]outcome[V], len(rivals))
	returned := make(chan int, len(rivals))
	for i, rival := range rivals {
		go func() {
			got, err := rival()
			out[i] = outcome[V]{got, err}
			returned <- i
		}()
	}
	if mustWait != "" {
		select {
		case i := <-returned:
			t.Fatalf("%s, got %+v", mustWait, out[i])
		case <-time.After(300 * time.Millisecond):
		}
	} else {
		time.Sleep(300 * time.Millisecond)
	}
	first := h.end()
	for range rivals {
		<-returned
	}
	return out, first
}

// requireBoundedWait runs rival while h is held, then ends h, and requires that rival
// gave up on the held keys with ErrContended within 5 s: the store's lock timeout bounds
// the wait.
func requireBoundedWait(t *testing.T, h *heldClaim, rival func() error) {
	t.Helper()
	start := time.Now()
	err := rival()
	waited := time.Since(start)
	_ = h.end()
	require.ErrorIs(t, err, inbox.ErrContended)
	require.Less(t, waited, 5*time.Second, "the wait is bounded")
}
