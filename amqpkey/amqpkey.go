// Package amqpkey makes messages consumed from RabbitMQ with watermill-amqp (v2 or v3)
// keyable by the inbox when they were not published by Watermill. It lives apart from
// the inbox package so that the core does not import an AMQP client, and it imports no
// watermill-amqp version: Marshaler has the method set of both v2's and v3's
// amqp.Marshaler interface.
//
// watermill-amqp's DefaultMarshaler reads the message UUID from the
// _watermill_message_uuid header only, drops the AMQP properties (the message_id
// property most producers set among them), and fails on any header whose value is not a
// string, such as the x-death table RabbitMQ adds to dead-lettered messages: the
// subscriber then nacks and requeues the message, forever. Marshaler keeps what the key
// needs and turns such headers into strings:
//
//	sub, err := amqp.NewSubscriber(amqp.Config{..., Marshaler: amqpkey.Marshaler{}}, logger)
//	ib, err := inbox.New(inbox.Config{Store: store,
//		Key: inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents, amqpkey.MessageID)})
package amqpkey

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/watermill-inbox/inbox"
)

// Metadata that Unmarshal sets from the AMQP delivery. They describe one delivery, not
// the message: Marshal does not publish them as headers, and Unmarshal overwrites (or
// removes) headers of the same names.
const (
	// MetadataMessageID holds the AMQP message_id property, when the producer set one.
	MetadataMessageID = "amqp_message_id"
	// MetadataRedelivered is "true" when the broker delivered the message before (the
	// AMQP redelivered flag: a nack with requeue, or a consumer that lost its
	// connection before the ack), "false" otherwise.
	MetadataRedelivered = "amqp_redelivered"
)

// DefaultUUIDHeader is the header Watermill publishers put the message UUID in.
const DefaultUUIDHeader = "_watermill_message_uuid"

// Inner is what Marshaler wraps: watermill-amqp's amqp.Marshaler interface, the same in
// v2 and v3.
type Inner interface {
	Marshal(msg *message.Message) (amqp091.Publishing, error)
	Unmarshal(d amqp091.Delivery) (*message.Message, error)
}

// Marshaler is a watermill-amqp marshaler (use it as amqp.Config.Marshaler) that keeps
// what inbox keys need. Unmarshal:
//   - converts header values that are not strings into strings before the inner
//     unmarshaler sees them: numbers, booleans and decimals as written, timestamps in
//     RFC 3339, byte arrays as their bytes, tables and arrays (x-death) as JSON with sorted
//     keys; so such a message is processed instead of being nacked and requeued forever;
//   - copies the message_id property into MetadataMessageID;
//   - sets MetadataRedelivered from the redelivered flag (watermill-amqp v2 does not
//     expose it; v3 sets its own _watermill_amqp_redelivered only when true).
//
// The zero value is ready to use and marshals like watermill-amqp's DefaultMarshaler.
type Marshaler struct {
	// Inner marshals outgoing messages and unmarshals the delivery once its headers are
	// strings: e.g. amqp.DefaultMarshaler{PostprocessPublishing: ...} or
	// amqp.CorrelatingMarshaler of either watermill-amqp version. Defaults to the same
	// behaviour as watermill-amqp's DefaultMarshaler: the UUID in the
	// _watermill_message_uuid header, the metadata as headers, persistent delivery mode.
	Inner Inner
}

// Marshal implements watermill-amqp's Marshaler. The delivery metadata Unmarshal sets is
// not published.
func (m Marshaler) Marshal(msg *message.Message) (amqp091.Publishing, error) {
	if msg.Metadata.Get(MetadataMessageID) != "" || msg.Metadata.Get(MetadataRedelivered) != "" {
		msg = msg.Copy()
		delete(msg.Metadata, MetadataMessageID)
		delete(msg.Metadata, MetadataRedelivered)
	}
	if m.Inner != nil {
		return m.Inner.Marshal(msg)
	}
	headers := make(amqp091.Table, len(msg.Metadata)+1)
	for k, v := range msg.Metadata {
		headers[k] = v
	}
	headers[DefaultUUIDHeader] = msg.UUID
	return amqp091.Publishing{Headers: headers, Body: msg.Payload, DeliveryMode: amqp091.Persistent}, nil
}

// Unmarshal implements watermill-amqp's Marshaler.
func (m Marshaler) Unmarshal(d amqp091.Delivery) (*message.Message, error) {
	d.Headers = StringHeaders(d.Headers)
	var msg *message.Message
	if m.Inner != nil {
		var err error
		if msg, err = m.Inner.Unmarshal(d); err != nil {
			return nil, err
		}
	} else {
		uuid, _ := d.Headers[DefaultUUIDHeader].(string)
		msg = message.NewMessage(uuid, d.Body)
		for k, v := range d.Headers {
			if k != DefaultUUIDHeader {
				msg.Metadata[k], _ = v.(string)
			}
		}
	}
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	delete(msg.Metadata, MetadataMessageID)
	if d.MessageId != "" {
		msg.Metadata.Set(MetadataMessageID, d.MessageId)
	}
	msg.Metadata.Set(MetadataRedelivered, strconv.FormatBool(d.Redelivered))
	return msg, nil
}

// MessageID is an inbox.KeyFunc that takes the key from the AMQP message_id property,
// which Marshaler copies into MetadataMessageID. Many non-Watermill producers set it;
// put it behind the keys you prefer:
//
//	inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents, amqpkey.MessageID)
func MessageID(msg *message.Message) (string, error) {
	if id := msg.Metadata.Get(MetadataMessageID); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("%w: no AMQP message_id property (metadata %q; is the subscriber's Marshaler an amqpkey.Marshaler?)", inbox.ErrNoKey, MetadataMessageID)
}

// IsRedelivered reports whether the broker marked the delivery as redelivered.
func IsRedelivered(msg *message.Message) bool {
	return msg.Metadata.Get(MetadataRedelivered) == "true"
}

// StringHeaders returns headers with every value a string (see Marshaler). It returns
// headers itself when they are all strings already.
func StringHeaders(headers amqp091.Table) amqp091.Table {
	clean := true
	for _, v := range headers {
		if _, ok := v.(string); !ok {
			clean = false
			break
		}
	}
	if clean {
		return headers
	}
	out := make(amqp091.Table, len(headers))
	for k, v := range headers {
		out[k] = headerString(v)
	}
	return out
}

// headerString writes one AMQP field value as a string.
func headerString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	case []byte:
		return string(v)
	case amqp091.Table, []any:
		out, err := json.Marshal(jsonValue(v))
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(out)
	}
	switch s := jsonValue(v).(type) {
	case string:
		return s
	case json.Number:
		return s.String()
	default:
		return fmt.Sprint(s)
	}
}

// jsonValue converts an AMQP field value into one encoding/json writes as it reads.
func jsonValue(v any) any {
	switch v := v.(type) {
	case amqp091.Table:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = jsonValue(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = jsonValue(e)
		}
		return s
	case []byte:
		return string(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	case amqp091.Decimal:
		return json.Number(decimalString(v))
	case float32:
		return json.Number(strconv.FormatFloat(float64(v), 'g', -1, 32))
	case float64:
		return json.Number(strconv.FormatFloat(v, 'g', -1, 64))
	case bool, string, nil:
		return v
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64:
		return json.Number(fmt.Sprint(v))
	}
	return fmt.Sprint(v)
}

// decimalString writes an AMQP decimal, Value × 10^-Scale, as written: 12345 scale 2 is
// "123.45".
func decimalString(d amqp091.Decimal) string {
	r := new(big.Rat).SetFrac(big.NewInt(int64(d.Value)), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale)), nil))
	return r.FloatString(int(d.Scale))
}
