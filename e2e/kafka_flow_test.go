package e2e_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// kafkaFlow is the scene of the Kafka rebalance tests: a topic of 4 partitions on the
// dev broker, a consumer group name and a setup of their own, and a publisher sending a
// credit message to the topic every 5 ms until it is stopped.
type kafkaFlow struct {
	brokers      []string
	s            setup
	topic, group string
	published    atomic.Int64
	stop         chan struct{}
	pubDone      chan error
}

// startKafkaFlow creates the topic, named after name, and starts publishing to it. The
// publisher stops when the test ends, if stopPublishing did not stop it before.
func startKafkaFlow(t *testing.T, name string) *kafkaFlow {
	t.Helper()
	f := &kafkaFlow{brokers: brokertest.KafkaBrokers(t), stop: make(chan struct{}), pubDone: make(chan error, 1)}
	f.s = newSetup(t)
	f.topic, f.group = brokertest.Name(name), brokertest.Name("group")
	brokertest.CreateTopic(t, f.brokers, f.topic, 4)
	pub := kafkaPublisher(t, f.brokers)
	go func() {
		for {
			select {
			case <-f.stop:
				f.pubDone <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := pub.Publish(f.topic, message.NewMessage(watermill.NewUUID(), []byte("credit"))); err != nil {
				f.pubDone <- err
				return
			}
			f.published.Add(1)
		}
	}()
	t.Cleanup(func() { f.stopPublishing(t) })
	return f
}

// stopPublishing stops the publisher, requires that it published without an error,
// and returns how many messages it published.
func (f *kafkaFlow) stopPublishing(t testing.TB) int {
	select {
	case <-f.stop:
	default:
		close(f.stop)
		require.NoError(t, <-f.pubDone)
	}
	return int(f.published.Load())
}

// awaitApplied waits until the ledger holds want distinct records.
func (f *kafkaFlow) awaitApplied(t testing.TB, want int) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, distinct := f.s.ledger.Counts(t)
		return distinct == want
	}, wait, 20*time.Millisecond, "all %d records applied", want)
}

// requireAppliedOnce requires that the ledger holds want records, each applied once.
func (f *kafkaFlow) requireAppliedOnce(t testing.TB, want int) {
	t.Helper()
	rows, distinct := f.s.ledger.Counts(t)
	require.Equal(t, want, distinct, "none lost")
	require.Equal(t, want, rows, "none applied twice")
}

// crashThenRestart publishes n records to a new topic of two partitions, starts a
// consumer process with args (Crash: it dies right after its first DB commit and ack,
// before Kafka's offset commit), kills it, and requires that it committed that record.
// Then ib consumes the topic in the same group, in this process, until every record is
// applied and the killed one came again. It returns that record's first redelivery, and
// the topic.
func crashThenRestart(t *testing.T, s setup, name string, n int, args helperArgs, ib *inbox.Inbox) (again delivery, topic string) {
	t.Helper()
	brokers := brokertest.KafkaBrokers(t)
	topic, group := brokertest.Name(name), brokertest.Name("group")
	brokertest.CreateTopic(t, brokers, topic, 2)
	pub := kafkaPublisher(t, brokers)
	for range n {
		require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("credit"))))
	}

	args.Broker, args.Crash, args.Brokers, args.Topic, args.Group = "kafka", true, brokers, topic, group
	args.InboxTable, args.LedgerTable = s.inboxTable, s.ledgerTable
	c := startChild(t, args)
	acked := c.waitFor(t, "acked", 1)
	c.kill(t)
	require.Equal(t, 1, s.ledger.Applied(t, acked), "the killed process committed %s", acked)

	rec := &recorder{}
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(rec.middleware, ib.Middleware)
		r.AddConsumerHandler("restart", topic, kafkaSubscriber(t, brokers, group, nil), func(msg *message.Message) error {
			return s.ledger.Apply(msg.Context(), "kafka", msg.UUID)
		})
	})
	redelivered := func(d delivery) bool { return d.UUID == acked }
	require.Eventually(t, func() bool {
		_, distinct := s.ledger.Counts(t)
		return distinct == n && len(rec.where(redelivered)) > 0
	}, wait, 20*time.Millisecond)
	rows, distinct := s.ledger.Counts(t)
	require.Equal(t, n, rows, "each record applied once")
	require.Equal(t, n, distinct)
	return rec.where(redelivered)[0], topic
}
