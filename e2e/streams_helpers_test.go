package e2e_test

import (
	"testing"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/internal/brokertest"
	"github.com/watermill-inbox/inbox/natskey"
	"github.com/watermill-inbox/inbox/rediskey"
)

// natsConsumer is how a test consumes a JetStream stream: through a durable consumer
// (also the queue group), created ahead with AddConsumer and bound to, so that a
// subscriber closing does not delete it (nats.go deletes a consumer it created itself on
// Unsubscribe).
type natsConsumer struct {
	Stream, Durable string
	AckWait         time.Duration // JetStream's redelivery timer
	AckWaitTimeout  time.Duration // watermill-nats' wait for the handler
}

// addNATSConsumer creates the stream (if missing) and the durable push consumer, with one
// message at most delivered and not acked, so that the tests see deliveries in stream
// order and nothing waits in a client's buffer while its AckWait runs.
func addNATSConsumer(t testing.TB, url string, c natsConsumer) {
	t.Helper()
	js := brokertest.JetStream(t, url)
	if _, err := js.StreamInfo(c.Stream); err != nil {
		_, err := js.AddStream(&nats.StreamConfig{Name: c.Stream, Subjects: []string{c.Stream}})
		require.NoError(t, err)
		brokertest.DeleteStreamOnCleanup(t, url, c.Stream)
	}
	_, err := js.AddConsumer(c.Stream, &nats.ConsumerConfig{
		Durable: c.Durable, DeliverGroup: c.Durable, DeliverSubject: nats.NewInbox(),
		AckPolicy: nats.AckExplicitPolicy, AckWait: c.AckWait, DeliverPolicy: nats.DeliverAllPolicy,
		MaxAckPending: 1,
	})
	require.NoError(t, err)
}

// natsSubscriber returns a watermill-nats JetStream subscriber bound to the consumer,
// with natskey.Unmarshaler.
func natsSubscriber(t testing.TB, url string, c natsConsumer) message.Subscriber {
	t.Helper()
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL:              url,
		QueueGroupPrefix: c.Durable,
		SubscribersCount: 1,
		AckWaitTimeout:   c.AckWaitTimeout,
		CloseTimeout:     5 * time.Second,
		Unmarshaler:      natskey.Unmarshaler{},
		JetStream: wmnats.JetStreamConfig{
			DurablePrefix:    c.Durable,
			SubscribeOptions: []nats.SubOpt{nats.Bind(c.Stream, c.Durable), nats.ManualAck()},
		},
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// natsPublisher returns a watermill-nats JetStream publisher.
func natsPublisher(t testing.TB, url string) message.Publisher {
	t.Helper()
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: url, Marshaler: &wmnats.NATSMarshaler{}}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// redisSubscriber returns a watermill-redisstream subscriber in the consumer group, with
// rediskey.Unmarshaller, a 10 ms sleep before an in-process resend after a nack, and a
// short MaxIdleTime, so that the entries a killed consumer left pending are claimed by
// another within about a second.
func redisSubscriber(t testing.TB, url, group, consumer string) message.Subscriber {
	t.Helper()
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:          brokertest.RedisClient(t, url),
		Unmarshaller:    rediskey.Unmarshaller{},
		ConsumerGroup:   group,
		Consumer:        consumer,
		NackResendSleep: 10 * time.Millisecond,
		MaxIdleTime:     time.Second,
		ClaimInterval:   200 * time.Millisecond,
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// redisPublisher returns a watermill-redisstream publisher.
func redisPublisher(t testing.TB, url string) message.Publisher {
	t.Helper()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: brokertest.RedisClient(t, url)}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// natsSubscriberCreating is natsSubscriber without a consumer created ahead: nats.go
// creates the durable consumer at Subscribe, and deletes it when the subscriber closes.
func natsSubscriberCreating(t testing.TB, url string, c natsConsumer) message.Subscriber {
	t.Helper()
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL: url, QueueGroupPrefix: c.Durable, SubscribersCount: 1, AckWaitTimeout: c.AckWaitTimeout,
		CloseTimeout: 5 * time.Second, Unmarshaler: natskey.Unmarshaler{},
		JetStream: wmnats.JetStreamConfig{DurablePrefix: c.Durable, SubscribeOptions: []nats.SubOpt{
			nats.AckWait(c.AckWait), nats.DeliverAll(), nats.AckExplicit(), nats.ManualAck(), nats.MaxAckPending(1)}},
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}
