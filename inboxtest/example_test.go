package inboxtest_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
)

// HandlerFunc gives a consumer handler, func(*message.Message) error, the shape the
// middleware wraps; every function of the kit takes either shape.
func ExampleHandlerFunc() {
	consumer := func(msg *message.Message) error {
		if len(msg.Payload) == 0 {
			return errors.New("empty payload")
		}
		return nil
	}
	h := inboxtest.HandlerFunc(consumer) // in a test: ib.Middleware(inboxtest.HandlerFunc(consumer))
	fmt.Println(inboxtest.Deliver(h, message.NewMessage("order-1", []byte("{}"))).Err)
	fmt.Println(inboxtest.Deliver(consumer, message.NewMessage("order-2", nil)).Err)
	// Output:
	// <nil>
	// empty payload
}

// Routed gives a message the handler name a Router would, so that an inbox configured as
// in production (no Config.Consumer) files its key under that consumer.
func ExampleRouted() {
	msg := inboxtest.Routed("billing", message.NewMessage("order-1", nil))
	fmt.Println(message.HandlerNameFromCtx(msg.Context()))
	// Output:
	// billing
}

// CheckOnce in a test of your own handler, on your test database: it fails with
// ErrEscaped when the handler writes outside the inbox transaction.
func ExampleCheckOnce() {
	var t *testing.T    // the test's
	var ib *inbox.Inbox // on a test database
	var credit func(*message.Message) error
	var balance func() (int64, error) // reads what credit changes

	err := inboxtest.CheckOnce(ib.Middleware, credit, message.NewMessage("order-1", nil),
		func() (any, error) { return balance() })
	if err != nil {
		t.Fatal(err)
	}
}
