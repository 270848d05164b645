package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
	"github.com/watermill-inbox/inbox/kafkakey"
)

// Offset mode through the Watermill middleware (inbox.Config.Position =
// kafkakey.Partition) on watermill-kafka and the dev broker: no key per message, one
// row per consumer, topic and partition.

// offsetInbox returns an inbox in offset mode on s's store.
func (s setup) offsetInbox(t testing.TB, consumer string, obs inbox.Observer) *inbox.Inbox {
	t.Helper()
	ib, err := inbox.New(inbox.Config{Store: s.store, Consumer: consumer, Position: kafkakey.Partition, Observer: obs})
	require.NoError(t, err)
	return ib
}

// logEnds returns the sum of the topic's partitions' end offsets: how many records it
// has, its offsets starting at 0.
func logEnds(t testing.TB, brokers []string, topic string) int64 {
	t.Helper()
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
	require.NoError(t, err)
	defer client.Close()
	parts, err := client.Partitions(topic)
	require.NoError(t, err)
	var sum int64
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		require.NoError(t, err)
		sum += end
	}
	return sum
}

// storedNext returns the sum of consumer's stored next offsets.
func storedNext(t testing.TB, ib *inbox.Inbox, consumer string) int64 {
	t.Helper()
	offsets, err := ib.Offsets(context.Background(), consumer)
	require.NoError(t, err)
	var sum int64
	for _, o := range offsets {
		sum += o.Next
	}
	return sum
}

// A consumer process killed after its DB commit and its ack, before Kafka's offset
// commit: the record comes again to the next member, which finds it below the stored
// offset and skips it.
func TestKafkaOffsetsCrashAfterCommitBeforeOffsetCommit(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	var outcomes brokertest.Outcomes
	ib := s.offsetInbox(t, "ledger", &outcomes)
	again, topic := crashThenRestart(t, s, "offcrash", 6, helperArgs{Consumer: "ledger", Offsets: true}, ib)
	require.True(t, isDuplicate(again), "the redelivered record must be skipped: %+v", again)
	require.Empty(t, brokertest.Keys(t, s.pool, s.inboxTable, "ledger"), "offset mode stores no key per message")
	require.Equal(t, logEnds(t, brokertest.KafkaBrokers(t), topic), storedNext(t, ib, "ledger"), "the stored offsets are the partitions' ends")
}

// Two consumer processes in offset mode in one group, the second joining while records
// flow (a rebalance), the first then SIGKILLed with acked but uncommitted offsets: every
// record applied once, and the stored offsets end at the log's ends.
func TestKafkaOffsetsRebalanceBetweenProcesses(t *testing.T) {
	t.Parallel()
	f := startKafkaFlow(t, "offrebalance")
	a, b, want := rebalanceThenKill(t, f, true)
	ib := f.s.offsetInbox(t, "ledger", nil)
	require.Eventually(t, func() bool { return storedNext(t, ib, "ledger") == int64(want) }, wait, 20*time.Millisecond)
	require.Equal(t, logEnds(t, f.brokers, f.topic), storedNext(t, ib, "ledger"))
	t.Logf("%d records; A processed %d, B processed %d and skipped %d duplicates", want, a.count("processed"), b.count("processed"), b.count("duplicate"))
}

// watermill-kafka reads a partition in order, one message at a time, whatever its
// configuration: without a consumer group (every read from the oldest offset), and in a
// group with Sarama's auto-commit off (it commits after each ack). A second read from
// the oldest offset (without a group, or in a new group) finds every record below the
// stored offsets and skips it.
func TestKafkaOffsetsSubscriberConfigurations(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	for _, tc := range []struct {
		name  string
		group func() string
		sc    func() *sarama.Config
	}{
		{"without a consumer group", func() string { return "" }, brokertest.SaramaSubscriberConfig},
		{"auto-commit off", func() string { return brokertest.Name("group") }, func() *sarama.Config {
			sc := brokertest.SaramaSubscriberConfig()
			sc.Consumer.Offsets.AutoCommit.Enable = false
			return sc
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			topic := brokertest.Name("offconfig")
			brokertest.CreateTopic(t, brokers, topic, 2)
			pub := kafkaPublisher(t, brokers)
			const n = 8
			for range n {
				require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("credit"))))
			}
			var outcomes brokertest.Outcomes
			ib := s.offsetInbox(t, "ledger", &outcomes)
			read := func(want inbox.Outcome) {
				stop := runRouter(t, func(r *message.Router) {
					r.AddMiddleware(ib.Middleware)
					r.AddConsumerHandler("ledger", topic, kafkaSubscriber(t, brokers, tc.group(), tc.sc()), func(m *message.Message) error {
						return s.ledger.Apply(m.Context(), "kafka", m.UUID)
					})
				})
				require.Eventually(t, func() bool { return outcomes.Count(want) >= n }, wait, 10*time.Millisecond)
				stop()
			}
			read(inbox.OutcomeProcessed)
			read(inbox.OutcomeDuplicate)
			require.Equal(t, n, outcomes.Count(inbox.OutcomeProcessed))
			rows, distinct := s.ledger.Counts(t)
			require.Equal(t, n, rows)
			require.Equal(t, n, distinct)
			require.Equal(t, int64(n), storedNext(t, ib, "ledger"))
		})
	}
}

// middleware.InstantAck in front of the inbox acks each message before its handler
// returns, so watermill-kafka sends the partition's next message at once: the inbox
// refuses it (ErrNotInOrder) instead of taking a later offset first, which would make
// the earlier record a duplicate.
func TestKafkaOffsetsRefuseInstantAck(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	s := newSetup(t)
	topic := brokertest.Name("offinstant")
	brokertest.CreateTopic(t, brokers, topic, 1)
	pub := kafkaPublisher(t, brokers)
	for range 10 {
		require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("credit"))))
	}
	var mu sync.Mutex
	var refused []error
	outcomes := map[string]int{} // what the inbox saw, for the failure's message
	obs := inbox.ObserverFunc(func(_ context.Context, o inbox.Observation) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[fmt.Sprint(o.Outcome, ": ", o.Err)]++
		if errors.Is(o.Err, inbox.ErrNotInOrder) {
			refused = append(refused, o.Err)
		}
	})
	ib := s.offsetInbox(t, "ledger", obs)
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(middleware.InstantAck, ib.Middleware)
		r.AddConsumerHandler("ledger", topic, kafkaSubscriber(t, brokers, brokertest.Name("group"), nil), func(m *message.Message) error {
			time.Sleep(50 * time.Millisecond) // the next message arrives meanwhile
			return s.ledger.Apply(m.Context(), "kafka", m.UUID)
		})
	})
	if !assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(refused) > 0
	}, wait, 10*time.Millisecond, "the partition's second message in flight is refused") {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the inbox saw %v", outcomes)
	}
	mu.Lock()
	require.ErrorContains(t, refused[0], "InstantAck")
	mu.Unlock()
}
