package outbox

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/google/uuid"

	"github.com/watermill-inbox/inbox"
)

// namespace is the UUIDv5 namespace of MessageID: the SHA-1 name-based UUID of this
// package's import path in the URL namespace, fixed so ids are stable across versions.
// tenantNamespace is TenantMessageID's, another, so that an id of a tenant's message is
// never one of a message without a tenant.
var (
	namespace       = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/watermill-inbox/inbox/outbox"))
	tenantNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/watermill-inbox/inbox/outbox#tenant"))
)

// MessageID returns the UUID to give the message a handler emits as name (its position or
// its kind: "0", "1" or "CashbackCredited"), while processing the consumed message whose
// inbox key is key for consumer. The same three strings always give the same UUID, so a
// handler that runs again after a rollback emits the same ids, and a consumer behind an
// inbox downstream treats the two emissions as one message. Different strings give
// different UUIDs (barring a SHA-1 collision).
//
// consumer and key are the consumed message's claim, as inbox.ClaimFromContext gives it:
// the inbox consumer (the handler's name by default) and the key as stored (what the
// configured inbox.KeyFunc returned, or its SHA-256 form when it is too long). In a
// handler, MessageIDFromContext reads them from the context for you. Give each message a
// handler emits for one consumed message its own name. Behind a TenantStore the tenant is
// part of the message's identity: use TenantMessageID.
//
// The result is a version 5 (SHA-1, name-based) UUID in its 36-character text form, which
// fits watermill-sql's uuid column. The three strings are length-prefixed before hashing,
// so ("a b", "c") and ("a", "b c") differ.
func MessageID(consumer, key, name string) string {
	return uuid.NewSHA1(namespace, lengthPrefixed(consumer, key, name)).String()
}

// TenantMessageID is MessageID for a message consumed in tenant (inbox.TenantFromContext):
// the same consumer, key and name in two tenants give two ids, since the same key in two
// tenants is two messages, and an inbox downstream must take their events as two. An
// empty tenant gives MessageID's id, unchanged, so that a service without tenants keeps
// its ids across an upgrade; a tenant's ids come from a namespace of their own, and
// never equal an id without a tenant.
func TenantMessageID(tenant, consumer, key, name string) string {
	if tenant == "" {
		return MessageID(consumer, key, name)
	}
	return uuid.NewSHA1(tenantNamespace, lengthPrefixed(tenant, consumer, key, name)).String()
}

// lengthPrefixed joins strings, each after its length, so that no two lists give the
// same bytes.
func lengthPrefixed(strs ...string) []byte {
	var buf []byte
	for _, s := range strs {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	return buf
}

// MessageIDFromContext is TenantMessageID for the message whose handler runs with ctx:
// the tenant, consumer and key come from the claim the inbox put in the handler's context
// (inbox.ClaimFromContext), so the id is the same on every run of the handler, whatever
// KeyFunc found the key, without repeating them; without a tenant it is MessageID's:
//
//	id, err := outbox.MessageIDFromContext(msg.Context(), "CashbackCredited")
//
// It fails with an error wrapping ErrNoTx when ctx is not a context the inbox gave a
// handler (behind ib.Middleware, inside Process, ProcessResult or an inboxhttp handler).
func MessageIDFromContext(ctx context.Context, name string) (string, error) {
	rec, ok := inbox.ClaimFromContext(ctx)
	if !ok {
		return "", fmt.Errorf("outbox: deriving the id of %q: the context carries no inbox claim (%w): call MessageIDFromContext with the context the handler got behind the inbox middleware (or inside Inbox.Process)", name, ErrNoTx)
	}
	return TenantMessageID(rec.Tenant, rec.Consumer, rec.Key, name), nil
}
