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

// A Watermill message is keyed by its UUID; messages published with nats.go directly are
// keyed by their Nats-Msg-Id header, kept by natskey.Unmarshaler (watermill-nats'
// NATSMarshaler drops it). The producer's retry after the stream's duplicate window is
// stored by JetStream and skipped by the inbox; a header with two values does not stop
// the message.
func TestNATSKeys(t *testing.T) {
	t.Parallel()
	url := brokertest.NATSURL(t)
	s := newSetup(t)
	c := natsConsumer{Stream: brokertest.Name("stream"), Durable: brokertest.Name("durable"), AckWait: time.Second, AckWaitTimeout: 10 * time.Second}
	js := brokertest.JetStream(t, url)
	_, err := js.AddStream(&nats.StreamConfig{Name: c.Stream, Subjects: []string{c.Stream}, Duplicates: 100 * time.Millisecond})
	require.NoError(t, err)
	brokertest.DeleteStreamOnCleanup(t, url, c.Stream)
	addNATSConsumer(t, url, c)

	wm := message.NewMessage(watermill.NewUUID(), []byte("watermill"))
	require.NoError(t, natsPublisher(t, url).Publish(c.Stream, wm))
	raw := func(id, body string, extra nats.Header) {
		m := nats.NewMsg(c.Stream)
		m.Data = []byte(body)
		m.Header.Set(nats.MsgIdHdr, id)
		for k, v := range extra {
			m.Header[k] = v
		}
		ack, err := js.PublishMsg(m)
		require.NoError(t, err)
		require.False(t, ack.Duplicate, "JetStream dropped %s as a duplicate", id)
	}
	raw("evt-1", "raw 1", nil)
	raw("evt-2", "raw 2", nats.Header{"X-Tag": {"a", "b"}})
	time.Sleep(300 * time.Millisecond) // past the stream's 100 ms duplicate window
	raw("evt-1", "raw 1", nil)         // the producer retried

	var outcomes brokertest.Outcomes
	rec := &recorder{}
	ib := s.inbox(t, inbox.FirstOf(inbox.KeyFromUUID, natskey.MsgID), &outcomes)
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(rec.middleware, ib.Middleware)
		r.AddConsumerHandler("ledger", c.Stream, natsSubscriber(t, url, c), func(m *message.Message) error {
			return s.ledger.Apply(m.Context(), "nats", string(m.Payload))
		})
	})
	require.Eventually(t, func() bool { return len(rec.all()) >= 4 }, wait, 10*time.Millisecond)

	for _, d := range rec.all() {
		require.NoError(t, d.Err, "payload %q", d.Payload)
	}
	require.Equal(t, 3, outcomes.Count(inbox.OutcomeProcessed))
	require.Equal(t, 1, outcomes.Count(inbox.OutcomeDuplicate))
	require.ElementsMatch(t, []string{wm.UUID, "evt-1", "evt-2"}, brokertest.Keys(t, s.pool, s.inboxTable, "ledger"))
	require.Equal(t, []string{"watermill", "raw 1", "raw 2"}, ledgerRefs(t, s), "each applied once, in stream order")
	tagged := rec.where(func(d delivery) bool { return d.Payload == "raw 2" })
	require.Equal(t, `["a","b"]`, tagged[0].Metadata["X-Tag"])
}

// ledgerRefs returns the ledger's refs in the order they were applied.
func ledgerRefs(t *testing.T, s setup) []string {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT ref FROM `+s.ledgerTable+` ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var refs []string
	for rows.Next() {
		var ref string
		require.NoError(t, rows.Scan(&ref))
		refs = append(refs, ref)
	}
	return refs
}

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
