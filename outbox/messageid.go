package outbox

import (
	"encoding/binary"

	"github.com/google/uuid"
)

// namespace is the UUIDv5 namespace of MessageID: the SHA-1 name-based UUID of this
// package's import path in the URL namespace, fixed so ids are stable across versions.
var namespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/watermill-inbox/inbox/outbox"))

// MessageID returns the UUID to give the message a handler emits as name (its position or
// its kind: "0", "1" or "CashbackCredited"), while processing the consumed message whose
// inbox key is key for consumer. The same three strings always give the same UUID, so a
// handler that runs again after a rollback emits the same ids, and a consumer behind an
// inbox downstream treats the two emissions as one message. Different strings give
// different UUIDs (barring a SHA-1 collision).
//
// key is the consumed message's inbox key: msg.UUID with the default KeyFromUUID, or what
// the configured inbox.KeyFunc returns. consumer is the inbox consumer: the handler's name
// by default. Give each message a handler emits for one consumed message its own name.
//
// The result is a version 5 (SHA-1, name-based) UUID in its 36-character text form, which
// fits watermill-sql's uuid column. The three strings are length-prefixed before hashing,
// so ("a b", "c") and ("a", "b c") differ.
func MessageID(consumer, key, name string) string {
	var buf []byte
	for _, s := range []string{consumer, key, name} {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	return uuid.NewSHA1(namespace, buf).String()
}
