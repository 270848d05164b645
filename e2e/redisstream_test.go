package e2e_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// newRedisStream names a stream of one test, deleted when it ends, and creates its
// consumer group (reading from the start), so that entries added before the first
// consumer subscribes are delivered.
func newRedisStream(t *testing.T, url string) (stream, group string) {
	t.Helper()
	stream, group = brokertest.Name("stream"), brokertest.Name("group")
	brokertest.DeleteRedisKeyOnCleanup(t, url, stream)
	c := brokertest.RedisClient(t, url)
	defer c.Close()
	require.NoError(t, c.XGroupCreateMkStream(context.Background(), stream, group, "0").Err())
	return stream, group
}

// A consumer process killed after the inbox committed and before the router acked
// (XACK): the entry stays pending for the dead consumer until another one's claim loop
// takes it over, MaxIdleTime (1 s here) after its delivery; the inbox skips it.
func TestRedisCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	url := brokertest.RedisURL(t)
	s := newSetup(t)
	stream, group := newRedisStream(t, url)
	msg := message.NewMessage(watermill.NewUUID(), []byte("credit"))
	require.NoError(t, redisPublisher(t, url).Publish(stream, msg))

	child := startChild(t, helperArgs{Broker: "redis", Crash: true, RedisURL: url, Topic: stream, Group: group,
		InboxTable: s.inboxTable, LedgerTable: s.ledgerTable, Consumer: "ledger"})
	require.Equal(t, msg.UUID, child.waitFor(t, "committed", 1))
	child.kill(t)
	require.Equal(t, 1, s.ledger.Applied(t, msg.UUID))
	requirePending(t, url, stream, group, "child", 1)

	skippedAfterCrash(t, s, stream, redisSubscriber(t, url, group, "restart"), "redis", msg.UUID)
	require.Eventually(t, func() bool { return pendingCount(t, url, stream, group) == 0 }, wait, 10*time.Millisecond, "and acked")
}

// pendingCount returns how many entries of the group are delivered and not acked.
func pendingCount(t *testing.T, url, stream, group string) int64 {
	t.Helper()
	c := brokertest.RedisClient(t, url)
	defer c.Close()
	p, err := c.XPending(context.Background(), stream, group).Result()
	require.NoError(t, err)
	return p.Count
}

// requirePending checks that consumer holds n pending entries of the group.
func requirePending(t *testing.T, url, stream, group, consumer string, n int64) {
	t.Helper()
	c := brokertest.RedisClient(t, url)
	defer c.Close()
	p, err := c.XPending(context.Background(), stream, group).Result()
	require.NoError(t, err)
	require.Equal(t, n, p.Consumers[consumer], "pending entries of %s: %+v", consumer, p)
}

// A handler error nacks the message; watermill-redisstream resends a copy in-process
// (after NackResendSleep), which the inbox processes once: the failed attempt's write
// rolled back with its key.
func TestRedisHandlerFailureResend(t *testing.T) {
	t.Parallel()
	url := brokertest.RedisURL(t)
	s := newSetup(t)
	stream, group := newRedisStream(t, url)
	msg := message.NewMessage(watermill.NewUUID(), []byte("credit"))
	require.NoError(t, redisPublisher(t, url).Publish(stream, msg))

	failOnceThenProcess(t, s, stream, redisSubscriber(t, url, group, "c1"), "redis", msg)
	require.Eventually(t, func() bool { return pendingCount(t, url, stream, group) == 0 }, wait, 10*time.Millisecond)
}

// A consumer stopped (its router closed) while entries flow, and another started in the
// same group: every entry is applied once. What the first had read and not acked stays
// pending and comes to the second through its claim loop, as a duplicate when the first
// had committed it.
func TestRedisConsumerRestart(t *testing.T) {
	t.Parallel()
	url := brokertest.RedisURL(t)
	s := newSetup(t)
	stream, group := newRedisStream(t, url)
	pub := redisPublisher(t, url)
	const n = 20
	for range n {
		require.NoError(t, pub.Publish(stream, message.NewMessage(watermill.NewUUID(), []byte("credit"))))
	}

	var first, second brokertest.Outcomes
	consume := func(outcomes *brokertest.Outcomes, consumer string, until func() bool) {
		ib := s.inbox(t, nil, outcomes)
		stop := runRouter(t, func(r *message.Router) {
			r.AddMiddleware(ib.Middleware)
			r.AddConsumerHandler("ledger", stream, redisSubscriber(t, url, group, consumer), func(m *message.Message) error {
				time.Sleep(5 * time.Millisecond)
				return s.ledger.Apply(m.Context(), "redis", m.UUID)
			})
		})
		require.Eventually(t, until, wait, 5*time.Millisecond)
		stop()
	}
	consume(&first, "first", func() bool { return first.Count(inbox.OutcomeProcessed) >= 5 })
	consume(&second, "second", func() bool {
		_, distinct := s.ledger.Counts(t)
		return distinct == n && pendingCount(t, url, stream, group) == 0
	})

	rows, distinct := s.ledger.Counts(t)
	require.Equal(t, n, distinct, "none lost")
	require.Equal(t, n, rows, "none applied twice")
	t.Logf("first processed %d; second processed %d and skipped %d", first.Count(inbox.OutcomeProcessed),
		second.Count(inbox.OutcomeProcessed), second.Count(inbox.OutcomeDuplicate))
}

// A Watermill message is keyed by its UUID; plain entries added with XADD by another
// producer are turned into messages by rediskey.Unmarshaller (the default unmarshaller
// fails on them, and its subscriber stops reading) and keyed by their event_id field.
// The producer's retry is skipped.
func TestRedisKeys(t *testing.T) {
	t.Parallel()
	url := brokertest.RedisURL(t)
	s := newSetup(t)
	stream, group := newRedisStream(t, url)
	wm := message.NewMessage(watermill.NewUUID(), []byte("watermill"))
	require.NoError(t, redisPublisher(t, url).Publish(stream, wm))
	c := brokertest.RedisClient(t, url)
	defer c.Close()
	for _, e := range []map[string]any{
		{"event_id": "evt-1", "payload": "raw 1", "source": "billing"},
		{"event_id": "evt-2", "payload": "raw 2"},
		{"event_id": "evt-1", "payload": "raw 1", "source": "billing"}, // the producer retried
	} {
		require.NoError(t, c.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: e}).Err())
	}

	var outcomes brokertest.Outcomes
	rec := &recorder{}
	ib := s.inbox(t, inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromMetadata("event_id")), &outcomes)
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(rec.middleware, ib.Middleware)
		r.AddConsumerHandler("ledger", stream, redisSubscriber(t, url, group, "c1"), func(m *message.Message) error {
			return s.ledger.Apply(m.Context(), "redis", string(m.Payload))
		})
	})
	require.Eventually(t, func() bool { return len(rec.all()) >= 4 }, wait, 10*time.Millisecond)

	for _, d := range rec.all() {
		require.NoError(t, d.Err, "payload %q", d.Payload)
	}
	require.Equal(t, 3, outcomes.Count(inbox.OutcomeProcessed))
	require.Equal(t, 1, outcomes.Count(inbox.OutcomeDuplicate))
	require.ElementsMatch(t, []string{wm.UUID, "evt-1", "evt-2"}, brokertest.Keys(t, s.pool, s.inboxTable, "ledger"))
	require.Equal(t, []string{"watermill", "raw 1", "raw 2"}, ledgerRefs(t, s))
	plain := rec.where(func(d delivery) bool { return d.Payload == "raw 1" })
	require.Empty(t, plain[0].UUID, "a plain entry has no Watermill UUID")
	require.Equal(t, "billing", plain[0].Metadata["source"], "its other fields are metadata")
}

// Why rediskey.Unmarshaller: with watermill-redisstream's default unmarshaller, a plain
// entry fails to unmarshal, and the subscriber stops reading the stream: the Watermill
// message behind it is never handled (not even after the claim interval).
func TestRedisPlainEntryStopsDefaultUnmarshaller(t *testing.T) {
	t.Parallel()
	url := brokertest.RedisURL(t)
	s := newSetup(t)
	stream, group := newRedisStream(t, url)
	c := brokertest.RedisClient(t, url)
	defer c.Close()
	require.NoError(t, c.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: map[string]any{"event_id": "evt-1"}}).Err())
	require.NoError(t, redisPublisher(t, url).Publish(stream, message.NewMessage(watermill.NewUUID(), []byte("watermill"))))

	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: brokertest.RedisClient(t, url), ConsumerGroup: group,
		Consumer: "c1", MaxIdleTime: time.Second, ClaimInterval: 200 * time.Millisecond}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	var calls atomic.Int32
	ib := s.inbox(t, inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromMetadata("event_id")), nil)
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(ib.Middleware)
		r.AddConsumerHandler("ledger", stream, sub, func(m *message.Message) error {
			calls.Add(1)
			return nil
		})
	})
	time.Sleep(3 * time.Second) // MaxIdleTime and several claim intervals
	require.Zero(t, calls.Load(), "neither the plain entry nor the Watermill message behind it was handled")
	require.Positive(t, pendingCount(t, url, stream, group), "what it read stays pending, never acked")
}
