package e2e_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
	"github.com/watermill-inbox/inbox/natskey"
)

// A router shut down while a handler runs: the handler's context is cancelled and its
// transaction rolls back. Without nats.ManualAck, nats.go acks the message when
// watermill-nats gives up on it, and the next consumer never gets it; with ManualAck it
// is redelivered after AckWait and applied once.
func TestNATSShutdownMidHandler(t *testing.T) {
	t.Parallel()
	url := brokertest.NATSURL(t)
	for _, manualAck := range []bool{false, true} {
		name := "without ManualAck: lost"
		if manualAck {
			name = "with ManualAck: redelivered"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			stream := brokertest.Name("shutdown")
			brokertest.DeleteStreamOnCleanup(t, url, stream)
			js := brokertest.JetStream(t, url)
			_, err := js.AddStream(&nats.StreamConfig{Name: stream, Subjects: []string{stream}})
			require.NoError(t, err)
			_, err = js.AddConsumer(stream, &nats.ConsumerConfig{Durable: stream, DeliverGroup: stream, DeliverSubject: nats.NewInbox(),
				AckPolicy: nats.AckExplicitPolicy, AckWait: time.Second, MaxAckPending: 1})
			require.NoError(t, err)
			subscribe := func() message.Subscriber {
				opts := []nats.SubOpt{nats.Bind(stream, stream)}
				if manualAck {
					opts = append(opts, nats.ManualAck())
				}
				sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{URL: url, QueueGroupPrefix: stream, AckWaitTimeout: 30 * time.Second,
					CloseTimeout: 5 * time.Second, Unmarshaler: natskey.Unmarshaler{},
					JetStream: wmnats.JetStreamConfig{DurablePrefix: stream, SubscribeOptions: opts}}, logger)
				require.NoError(t, err)
				t.Cleanup(func() { _ = sub.Close() })
				return sub
			}
			msg := message.NewMessage(watermill.NewUUID(), []byte("credit"))
			require.NoError(t, natsPublisher(t, url).Publish(stream, msg))

			started := make(chan struct{}, 1)
			ib := s.inbox(t, nil, nil)
			stop := runRouter(t, func(r *message.Router) {
				r.AddMiddleware(ib.Middleware)
				r.AddConsumerHandler("ledger", stream, subscribe(), func(m *message.Message) error {
					if err := s.ledger.Apply(m.Context(), "nats", m.UUID); err != nil {
						return err
					}
					started <- struct{}{}
					<-m.Context().Done() // a long handler, still running at the shutdown
					return m.Context().Err()
				})
			})
			<-started
			stop()
			require.Equal(t, 0, s.ledger.Applied(t, msg.UUID), "the shutdown rolled the handler back")

			var outcomes brokertest.Outcomes
			ib = s.inbox(t, nil, &outcomes)
			runRouter(t, func(r *message.Router) {
				r.AddMiddleware(ib.Middleware)
				r.AddConsumerHandler("ledger", stream, subscribe(), func(m *message.Message) error {
					return s.ledger.Apply(m.Context(), "nats", m.UUID)
				})
			})
			if manualAck {
				// The outcome is observed after the commit that the ledger shows: wait for it.
				require.Eventually(t, func() bool { return outcomes.Count(inbox.OutcomeProcessed) == 1 }, wait, 10*time.Millisecond)
				require.Equal(t, 1, s.ledger.Applied(t, msg.UUID))
				return
			}
			time.Sleep(3 * time.Second) // three AckWaits: nothing comes
			require.Equal(t, 0, outcomes.Count(inbox.OutcomeProcessed)+outcomes.Count(inbox.OutcomeFailed), "no redelivery: nats.go acked it")
			require.Equal(t, 0, s.ledger.Applied(t, msg.UUID), "lost")
			info, err := js.ConsumerInfo(stream, stream)
			require.NoError(t, err)
			require.Zero(t, info.NumAckPending)
			require.Zero(t, info.NumPending)
		})
	}
}
