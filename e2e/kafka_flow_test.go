package e2e_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

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
