// Package inboxtest helps test handlers behind the inbox middleware the way the inbox
// itself is tested: on a real database, with the deliveries that break naive consumers —
// the same message twice at once, a failure after the handler wrote, a crash between the
// commit and the ack, a publish of the produced messages that fails.
//
// The functions take a handler already wrapped by the middleware
// (ib.Middleware(handler)) and report what each delivery came to. They accept both shapes
// of Watermill handler (see Handler); HandlerFunc turns a consumer handler,
// func(*message.Message) error, into the shape ib.Middleware wraps.
//
// The inbox names its consumer after the Watermill handler, which only a Router sets.
// Outside a Router, either build the inbox under test with inbox.Config.Consumer, or
// leave it as in production and deliver messages made with Routed, which gives them the
// handler name a Router would.
package inboxtest

import (
	"errors"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox"
)

// Result is what one delivery of a message came to.
type Result struct {
	// Produced are the messages the router would publish: the handler's output on a
	// first delivery, the replayed output on a duplicate.
	Produced []*message.Message
	// Err is what the router would see: non-nil means a nack.
	Err error
	// Duplicate reports that the inbox found the key committed before.
	Duplicate bool
	// Outcome is what the inbox did with the delivery (inbox.MetadataOutcome): processed,
	// duplicate, replayed, mismatch or a failure; empty if the middleware never ran.
	Outcome inbox.Outcome
}

// Deliver delivers a copy of msg (UUID, metadata, payload and context) to h once.
func Deliver[H Handler](h H, msg *message.Message) Result {
	m := msg.CopyWithContext()
	produced, err := HandlerFunc(h)(m)
	return Result{
		Produced:  produced,
		Err:       err,
		Duplicate: m.Metadata.Get(inbox.MetadataDuplicate) == "true",
		Outcome:   inbox.Outcome(m.Metadata.Get(inbox.MetadataOutcome)),
	}
}

// DeliverConcurrently delivers n copies of msg to h at the same time, as consumers
// racing after a rebalance would, and returns their results in no particular order.
// With the inbox, exactly one is processed unless the handler fails.
func DeliverConcurrently[H Handler](h H, msg *message.Message, n int) []Result {
	f := HandlerFunc(h)
	results := make([]Result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = Deliver(f, msg)
		}()
	}
	close(start)
	wg.Wait()
	return results
}

// ErrInjected is the error FailAfter makes the handler return. Transient, as a real
// handler's failure would be: the next delivery runs the handler again.
var ErrInjected = errors.New("inboxtest: injected failure")

// FailAfter wraps a handler so that its first n calls run it fully, writes included, and
// then return ErrInjected: the inbox must roll the writes back with the key, and the next
// delivery must process the message.
func FailAfter[H Handler](n int, h H) message.HandlerFunc {
	f := HandlerFunc(h)
	var mu sync.Mutex
	calls := 0
	return func(msg *message.Message) ([]*message.Message, error) {
		produced, err := f(msg)
		mu.Lock()
		defer mu.Unlock()
		if calls++; err == nil && calls <= n {
			return nil, ErrInjected
		}
		return produced, err
	}
}

// CrashAfterCommit delivers msg to h, which commits, then drops the result as a process
// killed before the ack (and before publishing the produced messages) would, and
// delivers msg again, as the broker then does. It returns both results: the second must
// be a duplicate that replays the first's output (with the default Replay mode).
func CrashAfterCommit[H Handler](h H, msg *message.Message) (first, redelivery Result) {
	f := HandlerFunc(h)
	return Deliver(f, msg), Deliver(f, msg)
}

// FailingPublisher is a message.Publisher that fails its first Failures calls to Publish
// and passes the rest to Next: put it behind a router handler to prove that the inbox
// replays produced messages whose publish failed after the commit.
type FailingPublisher struct {
	Next     message.Publisher
	Failures int

	mu    sync.Mutex
	calls int
}

// ErrPublishFailed is the error FailingPublisher returns. Transient: the redelivery
// replays the stored output.
var ErrPublishFailed = errors.New("inboxtest: publish failed")

// Publish implements message.Publisher.
func (p *FailingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.calls++
	fail := p.calls <= p.Failures
	p.mu.Unlock()
	if fail {
		return ErrPublishFailed
	}
	return p.Next.Publish(topic, msgs...)
}

// Close implements message.Publisher.
func (p *FailingPublisher) Close() error { return p.Next.Close() }
