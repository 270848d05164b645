package redisstore_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// The README's advice for Watermill's Deduplicator on the Redis repository: a key
// factory of the message's identity, not the default hash of its payload. Any inbox
// KeyFunc is a middleware.MessageHasher; inbox.KeyFromUUID refuses a message without a
// UUID (a non-Watermill producer's) instead of keying them all as "".
func TestDeduplicatorKeyedByUUID(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	repo, err := redisstore.NewExpiringKeyRepository(client, redisstore.DedupConfig{Window: time.Hour, Prefix: testPrefix(t, client)})
	require.NoError(t, err)
	calls := 0
	handler := func(*message.Message) ([]*message.Message, error) { calls++; return nil, nil }

	// The control: the default key factory hashes the payload, so two messages with one
	// body are one.
	byPayload := middleware.Deduplicator{Repository: repo, Timeout: time.Minute}
	for _, id := range []string{"uuid-1", "uuid-2"} {
		_, err := byPayload.Middleware(handler)(message.NewMessage(id, []byte(`{"cents":190}`)))
		require.NoError(t, err)
	}
	require.Equal(t, 1, calls, "the second message, with the same body, was dropped")

	calls = 0
	byUUID := middleware.Deduplicator{KeyFactory: inbox.KeyFromUUID, Repository: repo, Timeout: time.Minute}
	for _, id := range []string{"uuid-3", "uuid-4", "uuid-3"} {
		_, err := byUUID.Middleware(handler)(message.NewMessage(id, []byte(`{"cents":190}`)))
		require.NoError(t, err)
	}
	require.Equal(t, 2, calls, "two messages, the redelivery of the first dropped")

	_, err = byUUID.Middleware(handler)(message.NewMessage("", []byte(`{}`)))
	require.ErrorIs(t, err, inbox.ErrNoKey, "no UUID: refused (nacked), not keyed as the empty string")
	require.Equal(t, 2, calls)

	// A KeyFunc built from others converts as it is.
	withFallback := middleware.Deduplicator{KeyFactory: middleware.MessageHasher(inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromMetadata("event_id"))), Repository: repo, Timeout: time.Minute}
	msg := message.NewMessage("", nil)
	msg.Metadata.Set("event_id", "evt-1")
	_, err = withFallback.Middleware(handler)(msg)
	require.NoError(t, err)
	require.Equal(t, 3, calls)
}
