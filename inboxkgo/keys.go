package inboxkgo

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
)

// Position is a record's position, for offset mode: its topic, partition, offset,
// leader epoch and time (the topic's ID is in the fetch, not the record: Run adds it).
func Position(r *kgo.Record) inbox.Position {
	epoch := r.LeaderEpoch
	if epoch < 0 {
		epoch = inbox.NoLeaderEpoch
	}
	return inbox.Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, LeaderEpoch: epoch, Timestamp: r.Timestamp}
}

// Header returns a Config.Key that keys a record by a header's value; a record without
// it has no key (inbox.ErrNoKey).
func Header(name string) func(r *kgo.Record) (inbox.Item, error) {
	return func(r *kgo.Record) (inbox.Item, error) {
		for _, h := range r.Headers {
			if h.Key == name && len(h.Value) > 0 {
				return inbox.Item{Key: string(h.Value)}, nil
			}
		}
		return inbox.Item{}, fmt.Errorf("%w: record %s/%d/%d has no %q header", inbox.ErrNoKey, r.Topic, r.Partition, r.Offset, name)
	}
}

// WatermillUUIDHeader is the header Watermill's Kafka marshaler
// (watermill-kafka's DefaultMarshaler) puts a message's UUID in.
const WatermillUUIDHeader = "_watermill_message_uuid"

// WatermillUUID is a Config.Key for records of Watermill's Kafka publisher: the message
// UUID, the key inbox.KeyFromUUID gives the same message behind the middleware.
var WatermillUUID = Header(WatermillUUIDHeader)
