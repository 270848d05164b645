package inbox_test

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox"
)

// The default key: the Watermill message UUID, which a Watermill publisher sends with
// the message and every redelivery carries.
func ExampleKeyFromUUID() {
	fmt.Println(inbox.KeyFromUUID(message.NewMessage("5c0e3b9e-order-1", nil)))
	_, err := inbox.KeyFromUUID(message.NewMessage("", nil)) // a producer that is not Watermill
	fmt.Println(errors.Is(err, inbox.ErrNoKey))
	// Output:
	// 5c0e3b9e-order-1 <nil>
	// true
}

// A key the producer puts in a header.
func ExampleKeyFromMetadata() {
	key := inbox.KeyFromMetadata("x-idempotency-key")
	msg := message.NewMessage("", nil)
	msg.Metadata.Set("x-idempotency-key", "payment-7731")
	fmt.Println(key(msg))
	// Output:
	// payment-7731 <nil>
}

// CloudEvents ids, from binary-mode headers or a structured JSON payload.
func ExampleKeyFromCloudEvents() {
	binary := message.NewMessage("", []byte(`{"amount":190}`))
	binary.Metadata.Set("ce_id", "evt-42")
	binary.Metadata.Set("ce_source", "/payments")
	fmt.Println(inbox.KeyFromCloudEvents(binary))

	structured := message.NewMessage("", []byte(`{"specversion":"1.0","id":"evt-43","source":"/payments","data":{}}`))
	fmt.Println(inbox.KeyFromCloudEvents(structured))
	// Output:
	// /payments evt-42 <nil>
	// /payments evt-43 <nil>
}
