package e2e_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/amqpkey"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// A consumer process killed after the inbox committed and before the router acked: its
// connection drops, RabbitMQ redelivers the message (redelivered flag set), and the next
// consumer skips it.
func TestRabbitMQCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	url := brokertest.AMQPURL(t)
	for _, version := range amqpVersions {
		t.Run("watermill-amqp "+version, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			queue := brokertest.Name("crash")
			brokertest.DeleteQueueOnCleanup(t, url, queue)
			sub := amqpSubscriber(t, version, url, queue) // declares the queue
			msg := message.NewMessage(watermill.NewUUID(), []byte("credit"))
			require.NoError(t, amqpPublisher(t, version, url).Publish(queue, msg))

			c := startChild(t, helperArgs{Broker: "amqp", Crash: true, AMQPURL: url, AMQPVersion: version, Queue: queue,
				InboxTable: s.inboxTable, LedgerTable: s.ledgerTable, Consumer: "ledger"})
			require.Equal(t, msg.UUID, c.waitFor(t, "committed", 1))
			c.kill(t)
			require.Equal(t, 1, s.ledger.Applied(t, msg.UUID))

			got := skippedAfterCrash(t, s, queue, sub, "amqp", msg.UUID)
			require.Equal(t, "true", got.Metadata[amqpkey.MetadataRedelivered], "RabbitMQ redelivered it")
		})
	}
}

// A message whose handler fails is nacked and requeued, comes back redelivered, and is
// then processed once: the failed attempt's write rolled back with its key.
func TestRabbitMQHandlerFailureRequeued(t *testing.T) {
	t.Parallel()
	url := brokertest.AMQPURL(t)
	for _, version := range amqpVersions {
		t.Run("watermill-amqp "+version, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			queue := brokertest.Name("requeue")
			brokertest.DeleteQueueOnCleanup(t, url, queue)
			sub := amqpSubscriber(t, version, url, queue)
			msg := message.NewMessage(watermill.NewUUID(), []byte("credit"))
			require.NoError(t, amqpPublisher(t, version, url).Publish(queue, msg))

			all := failOnceThenProcess(t, s, queue, sub, "amqp", msg)
			require.Equal(t, "false", all[0].Metadata[amqpkey.MetadataRedelivered])
			require.Equal(t, "true", all[1].Metadata[amqpkey.MetadataRedelivered], "requeued by the nack")
		})
	}
}

// Messages from non-Watermill producers, published with amqp091 directly: the AMQP
// message_id property, CloudEvents AMQP-binding headers, a structured CloudEvents JSON
// body, and an x-death table header (which the stock unmarshaler refuses forever). Each
// is keyed, processed once, and its duplicate skipped.
func TestRabbitMQNonWatermillProducers(t *testing.T) {
	t.Parallel()
	url := brokertest.AMQPURL(t)
	for _, version := range amqpVersions {
		t.Run("watermill-amqp "+version, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			queue := brokertest.Name("foreign")
			brokertest.DeleteQueueOnCleanup(t, url, queue)
			sub := amqpSubscriber(t, version, url, queue)

			messages := []struct {
				name    string
				pub     amqp091.Publishing
				wantKey string
			}{
				{"message_id property", amqp091.Publishing{MessageId: "m-1", Body: []byte("a")}, "m-1"},
				{"cloudEvents_ headers", amqp091.Publishing{Body: []byte("b"), Headers: amqp091.Table{
					"cloudEvents_specversion": "1.0", "cloudEvents_id": "c-1", "cloudEvents_source": "/billing", "cloudEvents_type": "paid"}}, "/billing c-1"},
				{"structured CloudEvents JSON", amqp091.Publishing{ContentType: "application/cloudevents+json",
					Body: []byte(`{"specversion":"1.0","id":"s-1","source":"/shop","type":"ordered","data":{"n":1}}`)}, "/shop s-1"},
				{"x-death and integer headers", amqp091.Publishing{MessageId: "m-2", Body: []byte("d"), Headers: amqp091.Table{
					"x-death": []any{amqp091.Table{"count": int64(1), "reason": "rejected", "queue": queue,
						"time": time.Now().Truncate(time.Second), "exchange": "", "routing-keys": []any{queue}}},
					"x-retries": int32(2)}}, "m-2"},
			}
			var pubs []amqp091.Publishing
			var wantKeys []string
			for _, m := range messages {
				pubs = append(pubs, m.pub, m.pub) // each twice: the second is a duplicate
				wantKeys = append(wantKeys, m.wantKey)
			}
			rawAMQPPublish(t, url, queue, pubs...)

			var outcomes brokertest.Outcomes
			ib := s.inbox(t, inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents, amqpkey.MessageID), &outcomes)
			rec := &recorder{}
			runRouter(t, func(r *message.Router) {
				r.AddMiddleware(rec.middleware, ib.Middleware)
				r.AddConsumerHandler("ledger", queue, sub, func(m *message.Message) error {
					return s.ledger.Apply(m.Context(), "amqp", string(m.Payload))
				})
			})
			require.Eventually(t, func() bool { return len(rec.all()) >= len(pubs) }, wait, 10*time.Millisecond)

			for _, d := range rec.all() {
				require.NoError(t, d.Err, "payload %q", d.Payload)
			}
			require.Len(t, rec.all(), len(pubs), "no message redelivered after an error")
			require.Equal(t, len(messages), outcomes.Count(inbox.OutcomeProcessed))
			require.Equal(t, len(messages), outcomes.Count(inbox.OutcomeDuplicate))
			require.ElementsMatch(t, wantKeys, brokertest.Keys(t, s.pool, s.inboxTable, "ledger"))
			rows, distinct := s.ledger.Counts(t)
			require.Equal(t, len(messages), rows)
			require.Equal(t, len(messages), distinct)
			xdeath := rec.where(func(d delivery) bool { return d.Payload == "d" })
			require.Contains(t, xdeath[0].Metadata["x-death"], `"reason":"rejected"`)
			require.Equal(t, "2", xdeath[0].Metadata["x-retries"])
		})
	}
}
