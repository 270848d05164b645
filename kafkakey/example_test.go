package kafkakey_test

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/kafkakey"
)

// Position is a last resort behind the producer's own keys, for records of producers
// that set none. It needs the topic, partition and offset that a Router and
// watermill-kafka put in the message context; without them it finds no key.
func ExamplePosition() {
	key := inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents, kafkakey.Position)
	_ = inbox.Config{Key: key} // with Store set, to inbox.New

	_, err := key(message.NewMessage("", nil)) // not routed from Kafka
	fmt.Println(errors.Is(err, inbox.ErrNoKey))
	// Output:
	// true
}

// Partition puts the inbox in offset mode: one row per consumer, topic and partition
// instead of a key per message. Without a Router and watermill-kafka's context a
// message has no position, and is never processed.
func ExamplePartition() {
	_ = inbox.Config{Position: kafkakey.Partition} // with Store set, to inbox.New

	_, err := kafkakey.Partition(message.NewMessage("", nil)) // not routed from Kafka
	fmt.Println(errors.Is(err, inbox.ErrNoKey))
	// Output:
	// true
}
