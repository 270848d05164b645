// Package natskey makes messages consumed from NATS JetStream with watermill-nats
// (github.com/ThreeDotsLabs/watermill-nats/v2) keyable by the inbox when they were not
// published by Watermill, and exposes JetStream's delivery count. It lives apart from the
// inbox package so that the core does not import a NATS client.
//
// watermill-nats' NATSMarshaler reads the message UUID from the _watermill_message_uuid
// header only and drops the Nats-Msg-Id header, the id most NATS producers set (JetStream
// deduplicates publishes by it); it also fails on a header with more than one value, and
// the subscriber then drops the message unhandled: with nats.ManualAck JetStream
// redelivers it after every AckWait, forever; without, nats.go acks it and it is lost.
// Unmarshaler keeps what the key needs:
//
//	sub, err := nats.NewSubscriber(nats.SubscriberConfig{..., Unmarshaler: natskey.Unmarshaler{}}, logger)
//	ib, err := inbox.New(inbox.Config{Store: store, Key: inbox.FirstOf(inbox.KeyFromUUID, natskey.MsgID)})
package natskey

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/watermill-inbox/inbox"
)

// Metadata that Unmarshal sets from the NATS message. They describe one delivery, not the
// message: Unmarshal overwrites (or removes) headers of the same names.
const (
	// MetadataMsgID holds the Nats-Msg-Id header, when the producer set one.
	MetadataMsgID = "nats_msg_id"
	// MetadataNumDelivered holds JetStream's delivery count of the message to this
	// consumer, "1" on the first delivery (absent without JetStream).
	MetadataNumDelivered = "nats_num_delivered"
)

// Unmarshaler is a watermill-nats Unmarshaler (use it as SubscriberConfig.Unmarshaler)
// that keeps what inbox keys need. Unmarshal:
//   - joins a header with several values into one value, a JSON array of strings, before
//     the inner unmarshaler sees it, so such a message is handled instead of redelivered
//     forever;
//   - copies the Nats-Msg-Id header into MetadataMsgID (read it with MsgID);
//   - copies JetStream's delivery count into MetadataNumDelivered (read it with
//     NumDelivered; MaxDeliveries acts on it).
type Unmarshaler struct {
	// Inner unmarshals the message. Defaults to watermill-nats' NATSMarshaler, which
	// reads the UUID from the _watermill_message_uuid header and the metadata from the
	// other headers.
	Inner wmnats.Unmarshaler
}

var _ wmnats.Unmarshaler = Unmarshaler{}

// Unmarshal implements watermill-nats' Unmarshaler.
func (u Unmarshaler) Unmarshal(m *nats.Msg) (*message.Message, error) {
	inner := u.Inner
	if inner == nil {
		inner = &wmnats.NATSMarshaler{}
	}
	in := m
	if multi(m.Header) {
		copied := *m
		copied.Header = make(nats.Header, len(m.Header))
		for k, v := range m.Header {
			if len(v) > 1 {
				joined, err := json.Marshal(v)
				if err != nil {
					return nil, fmt.Errorf("natskey: header %q: %w", k, err)
				}
				v = []string{string(joined)}
			}
			copied.Header[k] = v
		}
		in = &copied
	}
	msg, err := inner.Unmarshal(in)
	if err != nil {
		return nil, err
	}
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	delete(msg.Metadata, MetadataMsgID)
	delete(msg.Metadata, MetadataNumDelivered)
	if id := m.Header.Get(nats.MsgIdHdr); id != "" {
		msg.Metadata.Set(MetadataMsgID, id)
	}
	if m.Reply != "" {
		if md, err := m.Metadata(); err == nil {
			msg.Metadata.Set(MetadataNumDelivered, strconv.FormatUint(md.NumDelivered, 10))
		}
	}
	return msg, nil
}

func multi(h nats.Header) bool {
	for _, v := range h {
		if len(v) > 1 {
			return true
		}
	}
	return false
}

// MsgID is an inbox.KeyFunc that keys a message by its Nats-Msg-Id header, as kept by
// Unmarshaler. A message without one has no key: the error wraps inbox.ErrNoKey. Use it
// after KeyFromUUID for producers that are not Watermill:
//
//	inbox.FirstOf(inbox.KeyFromUUID, natskey.MsgID)
//
// JetStream itself drops a second publish with the same Nats-Msg-Id only within the
// stream's duplicate window (2 minutes by default); the inbox deduplicates for as long
// as it keeps the key, and deduplicates redeliveries, which the window does not.
func MsgID(msg *message.Message) (string, error) {
	if id := msg.Metadata.Get(MetadataMsgID); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("%w: no Nats-Msg-Id header (metadata %s; is the subscriber's Unmarshaler natskey.Unmarshaler?)", inbox.ErrNoKey, MetadataMsgID)
}

// NumDelivered returns JetStream's delivery count of msg, as kept by Unmarshaler: 1 on the
// first delivery, 2 on the first redelivery (after a nack, an AckWait that expired, or a
// consumer that died before its ack). ok is false when the count is unknown.
func NumDelivered(msg *message.Message) (n uint64, ok bool) {
	n, err := strconv.ParseUint(msg.Metadata.Get(MetadataNumDelivered), 10, 64)
	return n, err == nil
}

// ErrTooManyDeliveries is returned by MaxDeliveries' middleware for a message JetStream
// delivered more times than the limit. Route it with middleware.PoisonQueueWithFilter.
// Permanent (inbox.MarkPermanent).
var ErrTooManyDeliveries = inbox.MarkPermanent(errors.New("natskey: delivered too many times"))

// MaxDeliveries returns a middleware that refuses, without calling the handler, a message
// that JetStream delivered more than limit times: it returns an error wrapping
// ErrTooManyDeliveries, for a poison queue. A message whose count is unknown passes.
//
// Put it inside ib.Middleware: a redelivery whose key is already committed is then
// skipped as a duplicate (and acked) before the count is looked at, and a refused
// message rolls its key back, so that the poisoned copy is new when it is replayed:
//
//	router.AddMiddleware(poisonQueue, ib.Middleware, natskey.MaxDeliveries(5))
//
// It counts what JetStream counts: every delivery, whether the one before failed, was
// nacked, outlived AckWait or crashed its process (a handler that kills the process is
// caught after limit crashes, like inbox.Config.MaxAttempts, without its extra write per
// message). In-process retries (middleware.Retry) are one delivery. It panics if limit
// is 0.
func MaxDeliveries(limit uint64) message.HandlerMiddleware {
	if limit == 0 {
		panic("natskey.MaxDeliveries: limit must be at least 1")
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if n, ok := NumDelivered(msg); ok && n > limit {
				return nil, fmt.Errorf("%w: message %s delivered %d times, limit %d", ErrTooManyDeliveries, msg.UUID, n, limit)
			}
			return h(msg)
		}
	}
}
