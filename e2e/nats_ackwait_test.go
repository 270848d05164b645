package e2e_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
	"github.com/watermill-inbox/inbox/natskey"
)

// A handler slower than watermill-nats' AckWaitTimeout: the subscriber stops waiting and
// cancels the message context, so the inbox's statements (or its commit) fail with
// "context canceled" and the transaction rolls back.
//   - Without nats.ManualAck, nats.go acks the message as soon as watermill-nats' callback
//     returns, i.e. at the timeout: the message is gone, never applied.
//   - With nats.ManualAck, JetStream redelivers it after its own AckWait, and it fails the
//     same way on every delivery; natskey.MaxDeliveries, inside the inbox, sends it to the
//     poison queue after 3 deliveries.
//   - With an AckWaitTimeout longer than the handler, it is applied once.
func TestNATSSlowHandler(t *testing.T) {
	t.Parallel()
	url := brokertest.NATSURL(t)
	const handlerTime = 700 * time.Millisecond
	for _, tc := range []struct {
		name           string
		manualAck      bool
		ackWaitTimeout time.Duration
		ackWait        time.Duration // JetStream's
	}{
		{"without ManualAck: acked at the timeout, lost", false, 200 * time.Millisecond, time.Second},
		{"with ManualAck: redelivered, failing, then poisoned", true, 200 * time.Millisecond, time.Second},
		{"AckWaitTimeout above the handler's time", true, 20 * time.Second, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			stream := brokertest.Name("slow")
			brokertest.DeleteStreamOnCleanup(t, url, stream)
			opts := []nats.SubOpt{nats.AckWait(tc.ackWait), nats.DeliverAll(), nats.AckExplicit(), nats.MaxAckPending(1)}
			if tc.manualAck {
				opts = append(opts, nats.ManualAck())
			}
			sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{URL: url, QueueGroupPrefix: stream, AckWaitTimeout: tc.ackWaitTimeout,
				CloseTimeout: 5 * time.Second, Unmarshaler: natskey.Unmarshaler{},
				JetStream: wmnats.JetStreamConfig{AutoProvision: true, DurablePrefix: stream, SubscribeOptions: opts}}, logger)
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Close() })
			require.NoError(t, sub.SubscribeInitialize(stream))
			msg := message.NewMessage(watermill.NewUUID(), []byte("credit"))
			require.NoError(t, natsPublisher(t, url).Publish(stream, msg))

			poison := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, logger)
			poisoned, err := poison.Subscribe(t.Context(), "poison")
			require.NoError(t, err)
			pq, err := middleware.PoisonQueueWithFilter(poison, "poison", func(err error) bool { return errors.Is(err, natskey.ErrTooManyDeliveries) })
			require.NoError(t, err)
			var outcomes brokertest.Outcomes
			rec := &recorder{}
			var calls atomic.Int32
			ib := s.inbox(t, nil, &outcomes)
			runRouter(t, func(r *message.Router) {
				r.AddMiddleware(pq, rec.middleware, ib.Middleware, natskey.MaxDeliveries(3))
				r.AddConsumerHandler("ledger", stream, sub, func(m *message.Message) error {
					calls.Add(1)
					if err := s.ledger.Apply(m.Context(), "nats", m.UUID); err != nil {
						return err
					}
					time.Sleep(handlerTime)
					return nil
				})
			})

			switch {
			case !tc.manualAck:
				require.Eventually(t, func() bool { return len(rec.all()) >= 1 }, wait, 10*time.Millisecond)
				require.ErrorIs(t, rec.all()[0].Err, context.Canceled)
				// No redelivery comes: JetStream got the ack. (Its AckWait is 1 s; wait 3.)
				time.Sleep(3 * time.Second)
				require.Len(t, rec.all(), 1, "the message was acked, so never redelivered")
				require.Equal(t, 0, s.ledger.Applied(t, msg.UUID), "and never applied: lost")
			case tc.ackWaitTimeout < handlerTime:
				select {
				case p := <-poisoned:
					p.Ack()
					require.Equal(t, msg.UUID, p.UUID)
					require.Contains(t, p.Metadata.Get(middleware.ReasonForPoisonedKey), "delivered 4 times, limit 3")
				case <-time.After(wait):
					t.Fatal("the message never reached the poison queue")
				}
				all := rec.all()
				require.Len(t, all, 4)
				for i, d := range all[:3] {
					require.ErrorIs(t, d.Err, context.Canceled, "delivery %d", i+1)
					require.Contains(t, d.Err.Error(), "context canceled")
					require.Equal(t, strconv.Itoa(i+1), d.Metadata[natskey.MetadataNumDelivered])
				}
				require.ErrorIs(t, all[3].Err, natskey.ErrTooManyDeliveries)
				require.EqualValues(t, 3, calls.Load(), "the 4th delivery did not reach the handler")
				require.Equal(t, 0, s.ledger.Applied(t, msg.UUID))
			default:
				require.Eventually(t, func() bool { return outcomes.Count(inbox.OutcomeProcessed) == 1 }, wait, 10*time.Millisecond)
				require.Len(t, rec.all(), 1)
				require.Equal(t, 1, s.ledger.Applied(t, msg.UUID))
			}
			for _, d := range rec.all() {
				t.Logf("delivery %s: %v", d.Metadata[natskey.MetadataNumDelivered], d.Err)
			}
		})
	}
}

// An existing durable consumer keeps the AckWait it was created with: a subscriber that
// passes no nats.AckWait gets it silently, one that passes another value fails to
// subscribe, naming both.
func TestNATSExistingConsumerKeepsAckWait(t *testing.T) {
	t.Parallel()
	url := brokertest.NATSURL(t)
	stream, durable := brokertest.Name("stream"), brokertest.Name("durable")
	js := brokertest.JetStream(t, url)
	_, err := js.AddStream(&nats.StreamConfig{Name: stream, Subjects: []string{stream}})
	require.NoError(t, err)
	brokertest.DeleteStreamOnCleanup(t, url, stream)
	_, err = js.AddConsumer(stream, &nats.ConsumerConfig{Durable: durable, DeliverGroup: durable, DeliverSubject: nats.NewInbox(),
		AckPolicy: nats.AckExplicitPolicy}) // AckWait left to the server: 30 s
	require.NoError(t, err)

	subscribe := func(opts ...nats.SubOpt) error {
		// A failed Subscribe leaves watermill-nats waiting CloseTimeout in Close.
		sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{URL: url, QueueGroupPrefix: durable, Unmarshaler: natskey.Unmarshaler{}, CloseTimeout: time.Second,
			JetStream: wmnats.JetStreamConfig{DurablePrefix: durable, SubscribeOptions: append(opts, nats.ManualAck())}}, logger)
		require.NoError(t, err)
		defer sub.Close()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		_, err = sub.Subscribe(ctx, stream)
		return err
	}
	err = subscribe(nats.AckWait(time.Minute))
	require.ErrorContains(t, err, "configuration requests ack wait to be 1m0s, but consumer's value is 30s")
	require.NoError(t, subscribe())
	info, err := js.ConsumerInfo(stream, durable)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, info.Config.AckWait)
}
