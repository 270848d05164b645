package e2e_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
	"github.com/watermill-inbox/inbox/natskey"
)

// newNATSConsumer creates a stream and a durable consumer of its own for one test, with a
// 1 s AckWait so that a redelivery after a crash comes quickly.
func newNATSConsumer(t *testing.T, url string) natsConsumer {
	t.Helper()
	c := natsConsumer{Stream: brokertest.Name("stream"), Durable: brokertest.Name("durable"),
		AckWait: time.Second, AckWaitTimeout: 10 * time.Second}
	addNATSConsumer(t, url, c)
	return c
}

// A consumer process killed after the inbox committed and before the router acked:
// JetStream redelivers the message once AckWait has passed (delivery count 2), and the
// next consumer skips it.
func TestNATSCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	url := brokertest.NATSURL(t)
	s := newSetup(t)
	c := newNATSConsumer(t, url)
	msg := message.NewMessage(watermill.NewUUID(), []byte("credit"))
	require.NoError(t, natsPublisher(t, url).Publish(c.Stream, msg))

	child := startChild(t, helperArgs{Broker: "nats", Crash: true, NATSURL: url, NATS: c, Topic: c.Stream,
		InboxTable: s.inboxTable, LedgerTable: s.ledgerTable, Consumer: "ledger"})
	require.Equal(t, msg.UUID, child.waitFor(t, "committed", 1))
	child.kill(t)
	require.Equal(t, 1, s.ledger.Applied(t, msg.UUID))

	got := skippedAfterCrash(t, s, c.Stream, natsSubscriber(t, url, c), "nats", msg.UUID)
	require.Equal(t, "2", got.Metadata[natskey.MetadataNumDelivered], "JetStream redelivered it")
}

// A message whose handler fails is nacked (Nak), redelivered at once with delivery count
// 2, and then processed once: the failed attempt's write rolled back with its key.
func TestNATSHandlerFailureRedelivered(t *testing.T) {
	t.Parallel()
	url := brokertest.NATSURL(t)
	s := newSetup(t)
	c := newNATSConsumer(t, url)
	msg := message.NewMessage(watermill.NewUUID(), []byte("credit"))
	require.NoError(t, natsPublisher(t, url).Publish(c.Stream, msg))

	all := failOnceThenProcess(t, s, c.Stream, natsSubscriber(t, url, c), "nats", msg)
	require.Equal(t, "1", all[0].Metadata[natskey.MetadataNumDelivered])
	require.Equal(t, "2", all[1].Metadata[natskey.MetadataNumDelivered], "redelivered after the Nak")
}

// A consumer stopped (its router closed) and another started on the same durable
// consumer: it goes on after the last ack, and every message is applied once. When
// nats.go created the durable consumer itself (no AddConsumer ahead, no nats.Bind),
// closing the subscriber deletes it: the next subscriber creates it again and, with
// DeliverAll, gets the whole stream again, which the inbox skips.
//
// Each consumer stops once the stream is drained: watermill-nats v2.1.3 closes its output
// channel while a NATS callback may still send on it, which the race detector reports
// when a message is in flight at the stop (SIGKILLed consumers are in the crash test).
func TestNATSConsumerRestart(t *testing.T) {
	t.Parallel()
	url := brokertest.NATSURL(t)
	for _, tc := range []struct {
		name    string
		created bool // the test creates the consumer and binds to it
	}{{"consumer created ahead and bound", true}, {"consumer created by nats.go", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			c := natsConsumer{Stream: brokertest.Name("stream"), Durable: brokertest.Name("durable"),
				AckWait: time.Second, AckWaitTimeout: 10 * time.Second}
			js := brokertest.JetStream(t, url)
			_, err := js.AddStream(&nats.StreamConfig{Name: c.Stream, Subjects: []string{c.Stream}})
			require.NoError(t, err)
			brokertest.DeleteStreamOnCleanup(t, url, c.Stream)
			subscribe := func() message.Subscriber { return natsSubscriber(t, url, c) }
			if tc.created {
				addNATSConsumer(t, url, c)
			} else {
				subscribe = func() message.Subscriber { return natsSubscriberCreating(t, url, c) }
			}
			pub := natsPublisher(t, url)
			publish := func(n int) {
				for range n {
					require.NoError(t, pub.Publish(c.Stream, message.NewMessage(watermill.NewUUID(), []byte("credit"))))
				}
			}
			consume := func(outcomes *brokertest.Outcomes, until func() bool) {
				ib := s.inbox(t, nil, outcomes)
				stop := runRouter(t, func(r *message.Router) {
					r.AddMiddleware(ib.Middleware)
					r.AddConsumerHandler("ledger", c.Stream, subscribe(), func(m *message.Message) error {
						return s.ledger.Apply(m.Context(), "nats", m.UUID)
					})
				})
				require.Eventually(t, until, wait, 10*time.Millisecond)
				stop()
			}
			var first, second brokertest.Outcomes
			publish(4)
			consume(&first, func() bool { return first.Count(inbox.OutcomeProcessed) == 4 })
			publish(6)
			if tc.created {
				consume(&second, func() bool { return second.Count(inbox.OutcomeProcessed) == 6 })
				require.Equal(t, 0, second.Count(inbox.OutcomeDuplicate), "the second consumer goes on after the last ack")
			} else {
				consume(&second, func() bool {
					return second.Count(inbox.OutcomeProcessed) == 6 && second.Count(inbox.OutcomeDuplicate) == 4
				})
			}
			rows, distinct := s.ledger.Counts(t)
			require.Equal(t, 10, distinct, "none lost")
			require.Equal(t, 10, rows, "none applied twice")
		})
	}
}
