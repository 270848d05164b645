package amqpkey_test

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/amqpkey"
)

// The Marshaler keeps the AMQP message_id and redelivered flag of a delivery from a
// producer that is not Watermill; MessageID is then a key.
func ExampleMarshaler() {
	m := amqpkey.Marshaler{Inner: amqp.DefaultMarshaler{}}
	msg, err := m.Unmarshal(amqp091.Delivery{
		MessageId:   "invoice-2024-0042",
		Redelivered: true,
		Headers:     amqp091.Table{"x-death": []any{amqp091.Table{"count": int64(1)}}},
		Body:        []byte(`{"total":190}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	key := inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents, amqpkey.MessageID)
	fmt.Println(key(msg))
	fmt.Println(amqpkey.IsRedelivered(msg))
	// Output:
	// invoice-2024-0042 <nil>
	// true
}

// MessageID alone, on metadata the Marshaler set.
func ExampleMessageID() {
	msg := message.NewMessage("", nil)
	msg.Metadata.Set(amqpkey.MetadataMessageID, "invoice-2024-0043")
	fmt.Println(amqpkey.MessageID(msg))
	// Output:
	// invoice-2024-0043 <nil>
}
