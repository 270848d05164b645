package kafkakey_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
	"github.com/watermill-inbox/inbox/kafkakey"
)

var (
	_ inbox.KeyFunc      = kafkakey.Position
	_ inbox.PositionFunc = kafkakey.Partition
)

func TestPositionWithoutKafkaContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  func(t *testing.T) (string, error)
	}{
		{"outside a router", func(*testing.T) (string, error) {
			return kafkakey.Position(message.NewMessage("u", nil))
		}},
		{"from a Pub/Sub that is not Kafka", func(t *testing.T) (string, error) {
			// A Router sets the topic, but a GoChannel message has no partition or offset.
			pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			require.NoError(t, err)
			type result struct {
				key string
				err error
			}
			results := make(chan result, 1)
			router.AddConsumerHandler("position", "topic", pubSub, func(msg *message.Message) error {
				key, err := kafkakey.Position(msg)
				results <- result{key, err}
				return nil
			})
			go func() { _ = router.Run(context.Background()) }()
			defer router.Close()
			<-router.Running()
			require.NoError(t, pubSub.Publish("topic", message.NewMessage("u", nil)))
			r := <-results
			return r.key, r.err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key, err := tt.key(t)
			require.ErrorIs(t, err, inbox.ErrNoKey)
			require.Empty(t, key)
		})
	}
}

// TestPosition consumes records from the dev broker through a Router and checks that each
// gets its own "topic/partition/offset" key, and that a second read of the topic (no
// consumer group, so no committed offsets) gives the same keys.
func TestPosition(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	topic := brokertest.Name("kafkakey")
	brokertest.CreateTopic(t, brokers, topic, 2)

	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.DefaultMarshaler{}}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	const n = 6
	for i := range n {
		require.NoError(t, pub.Publish(topic, message.NewMessage(fmt.Sprintf("u-%d", i), []byte("x"))))
	}

	read := func() map[string]string { // UUID -> key
		t.Helper()
		var mu sync.Mutex
		keys := map[string]string{}
		var handlerErrs []error
		sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
			Brokers: brokers, Unmarshaler: kafka.DefaultMarshaler{}, OverwriteSaramaConfig: brokertest.SaramaSubscriberConfig(),
		}, watermill.NopLogger{})
		require.NoError(t, err)
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddConsumerHandler("position", topic, sub, func(msg *message.Message) error {
			key, err := kafkakey.Position(msg)
			if err == nil { // offset mode's position is the same place, with the record's time
				var pos inbox.Position
				if pos, err = kafkakey.Partition(msg); err == nil && (pos.String() != key || pos.Timestamp.IsZero() || pos.LeaderEpoch != inbox.NoLeaderEpoch) {
					err = fmt.Errorf("position %+v for key %s", pos, key)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				handlerErrs = append(handlerErrs, err)
				return nil
			}
			keys[msg.UUID] = key
			return nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- router.Run(ctx) }()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(keys)+len(handlerErrs) >= n
		}, 30*time.Second, 20*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		require.Empty(t, handlerErrs)
		return keys
	}

	first := read()
	seen := map[string]bool{}
	for uuid, key := range first {
		require.Regexp(t, "^"+topic+"/[01]/[0-9]+$", key, "message %s", uuid)
		require.False(t, seen[key], "key %s given twice", key)
		seen[key] = true
	}
	require.Equal(t, first, read(), "a record read again must get the same key")
}
