// Package rediskey makes plain Redis stream entries, added by producers that are not
// Watermill (XADD from any client), consumable and keyable through
// watermill-redisstream (github.com/ThreeDotsLabs/watermill-redisstream). It lives apart
// from the inbox package so that the core does not import a Redis client.
//
// watermill-redisstream's DefaultMarshallerUnmarshaller expects the fields a Watermill
// publisher writes (_watermill_message_uuid, metadata, payload) and fails on any other
// entry; a failed unmarshal stops the subscriber's read loop for that stream, so one plain
// entry halts the consumer (it logs "processMessage fail" and its handler stops). Unmarshaller
// turns a plain entry into a message whose metadata are the entry's fields; key it by the
// field the producer fills with an id:
//
//	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{..., Unmarshaller: rediskey.Unmarshaller{}}, logger)
//	ib, err := inbox.New(inbox.Config{Store: store, Key: inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromMetadata("event_id"))})
package rediskey

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
)

// DefaultPayloadField is the field of a plain entry that Unmarshaller takes as the
// payload unless told otherwise.
const DefaultPayloadField = "payload"

// Unmarshaller is a watermill-redisstream Unmarshaller (use it as
// SubscriberConfig.Unmarshaller) for streams that Watermill and other producers write
// to. An entry with the _watermill_message_uuid field is unmarshalled by Inner; any other
// entry is a plain one: its message has no UUID, its payload is the PayloadField field,
// and every other field is set as metadata of the same name (values that are not strings
// are formatted with %v).
type Unmarshaller struct {
	// Inner unmarshals entries written by a Watermill publisher. Defaults to
	// redisstream.DefaultMarshallerUnmarshaller.
	Inner redisstream.Unmarshaller
	// PayloadField names the field of a plain entry that holds the payload. Defaults to
	// DefaultPayloadField ("payload"); an entry without it has an empty payload.
	PayloadField string
}

var _ redisstream.Unmarshaller = Unmarshaller{}

// Unmarshal implements watermill-redisstream's Unmarshaller.
func (u Unmarshaller) Unmarshal(values map[string]any) (*message.Message, error) {
	if _, ok := values[redisstream.UUIDHeaderKey]; ok {
		inner := u.Inner
		if inner == nil {
			inner = redisstream.DefaultMarshallerUnmarshaller{}
		}
		return inner.Unmarshal(values)
	}
	field := u.PayloadField
	if field == "" {
		field = DefaultPayloadField
	}
	msg := message.NewMessage("", nil)
	for k, v := range values {
		s, ok := v.(string)
		if !ok {
			s = fmt.Sprint(v)
		}
		if k == field {
			msg.Payload = []byte(s)
			continue
		}
		msg.Metadata.Set(k, s)
	}
	return msg, nil
}
