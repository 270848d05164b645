package e2e_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
	"github.com/watermill-inbox/inbox/kafkakey"
)

// A consumer process killed after its DB commit and its ack, but before its offset
// commit: the record comes again to the next member of the group, and is skipped.
func TestKafkaCrashAfterCommitBeforeOffsetCommit(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	var outcomes brokertest.Outcomes
	ib, err := inbox.New(inbox.Config{Store: s.store, Consumer: "ledger", Observer: &outcomes})
	require.NoError(t, err)
	again, _ := crashThenRestart(t, s, "crash", 4, helperArgs{Consumer: "ledger"}, ib)
	require.True(t, isDuplicate(again), "the redelivered record must be skipped: %+v", again)
	require.GreaterOrEqual(t, outcomes.Count(inbox.OutcomeDuplicate), 1)
}

// rebalanceThenKill runs the rebalance tests' two consumer processes on f, in key mode
// or offset mode: A consumes, B joins the group (a rebalance), A goes on with its share
// in the new generation, acking offsets that stay uncommitted, and is SIGKILLed; B takes
// over A's partitions. Once publishing stops, every record is applied once, and B has
// skipped the records A acked and never committed. want is how many were published.
func rebalanceThenKill(t *testing.T, f *kafkaFlow, offsets bool) (a, b *child, want int) {
	t.Helper()
	args := helperArgs{Broker: "kafka", Brokers: f.brokers, Topic: f.topic, Group: f.group,
		InboxTable: f.s.inboxTable, LedgerTable: f.s.ledgerTable, Consumer: "ledger", Offsets: offsets}
	a = startChild(t, args)
	a.waitFor(t, "processed", 10)
	b = startChild(t, args)
	b.waitFor(t, "processed", 10) // B got partitions: the group rebalanced
	a.waitFor(t, "processed", a.count("processed")+5)
	a.kill(t)
	b.waitFor(t, "processed", b.count("processed")+10) // B took over A's partitions
	want = f.stopPublishing(t)

	f.awaitApplied(t, want)
	f.requireAppliedOnce(t, want)
	require.GreaterOrEqual(t, b.count("duplicate"), 1, "records A acked but never committed came to B and were skipped")
	return a, b, want
}

// Two consumer processes in one group, one joining while records flow (a rebalance), the
// other then SIGKILLed with acked but uncommitted offsets: every record applied once.
func TestKafkaRebalanceBetweenProcesses(t *testing.T) {
	t.Parallel()
	f := startKafkaFlow(t, "rebalance")
	a, b, want := rebalanceThenKill(t, f, false)
	t.Logf("%d records; A processed %d, B processed %d and skipped %d duplicates", want, a.count("processed"), b.count("processed"), b.count("duplicate"))
}

// A failing handler on Kafka: watermill-kafka resends a copy of the message in-process,
// with the metadata the failed attempt left on it. The inbox clears its own marks on
// entry, so the resend is processed, not taken for a duplicate.
func TestKafkaHandlerFailureResend(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	s := newSetup(t)
	topic := brokertest.Name("resend")
	brokertest.CreateTopic(t, brokers, topic, 1)
	msg := message.NewMessage(watermill.NewUUID(), []byte("credit"))
	require.NoError(t, kafkaPublisher(t, brokers).Publish(topic, msg))

	var outcomes brokertest.Outcomes
	ib := s.inbox(t, nil, &outcomes)
	var mu sync.Mutex
	var atEntry []string // MetadataDuplicate as each attempt enters the inbox middleware
	var attempts atomic.Int32
	// stale leaves the inbox's marks on a failed attempt, as an outer middleware (or an
	// earlier inbox verdict) might: watermill-kafka's resend copies them.
	stale := func(h message.HandlerFunc) message.HandlerFunc {
		return func(m *message.Message) ([]*message.Message, error) {
			mu.Lock()
			atEntry = append(atEntry, m.Metadata.Get(inbox.MetadataDuplicate))
			mu.Unlock()
			out, err := h(m)
			if err != nil {
				m.Metadata.Set(inbox.MetadataDuplicate, "true")
				m.Metadata.Set(inbox.MetadataMismatch, "true")
			}
			return out, err
		}
	}
	rec := &recorder{}
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(rec.middleware, stale, ib.Middleware)
		r.AddConsumerHandler("ledger", topic, kafkaSubscriber(t, brokers, brokertest.Name("group"), nil), func(m *message.Message) error {
			if err := s.ledger.Apply(m.Context(), "kafka", m.UUID); err != nil {
				return err
			}
			if attempts.Add(1) == 1 {
				return errors.New("first attempt fails after writing")
			}
			return nil
		})
	})
	require.Eventually(t, func() bool { return len(rec.where(func(d delivery) bool { return d.Err == nil })) >= 1 }, wait, 10*time.Millisecond)

	all := rec.all()
	require.Len(t, all, 2)
	require.Error(t, all[0].Err)
	require.Equal(t, msg.UUID, all[1].UUID)
	mu.Lock()
	require.Equal(t, []string{"", "true"}, atEntry, "the resend carries the stale mark into the middleware")
	mu.Unlock()
	require.Empty(t, all[1].Metadata[inbox.MetadataDuplicate], "the resend is not a duplicate")
	require.Empty(t, all[1].Metadata[inbox.MetadataMismatch])
	require.Equal(t, 1, outcomes.Count(inbox.OutcomeFailed))
	require.Equal(t, 1, outcomes.Count(inbox.OutcomeProcessed))
	require.Equal(t, 0, outcomes.Count(inbox.OutcomeDuplicate))
	require.Equal(t, 1, s.ledger.Applied(t, msg.UUID), "the failed attempt's write rolled back")
}

// Records from a non-Watermill producer with CloudEvents binary-mode headers (ce_id,
// ce_source) are keyed by source and id; the duplicate is skipped.
func TestKafkaCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	s := newSetup(t)
	topic := brokertest.Name("cloudevents")
	brokertest.CreateTopic(t, brokers, topic, 2)
	producer := rawKafkaProducer(t, brokers)
	send := func(id string) {
		_, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("event " + id), Headers: []sarama.RecordHeader{
			{Key: []byte("ce_specversion"), Value: []byte("1.0")},
			{Key: []byte("ce_id"), Value: []byte(id)},
			{Key: []byte("ce_source"), Value: []byte("/orders")},
			{Key: []byte("ce_type"), Value: []byte("order.paid")},
		}})
		require.NoError(t, err)
	}
	send("evt-1")
	send("evt-2")
	send("evt-1") // the producer retried

	var outcomes brokertest.Outcomes
	ib := s.inbox(t, inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents), &outcomes)
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(ib.Middleware)
		r.AddConsumerHandler("ledger", topic, kafkaSubscriber(t, brokers, brokertest.Name("group"), nil), func(m *message.Message) error {
			return s.ledger.Apply(m.Context(), "kafka", string(m.Payload))
		})
	})
	require.Eventually(t, func() bool {
		return outcomes.Count(inbox.OutcomeProcessed)+outcomes.Count(inbox.OutcomeDuplicate) >= 3
	}, wait, 10*time.Millisecond)
	require.Equal(t, 2, outcomes.Count(inbox.OutcomeProcessed))
	require.Equal(t, 1, outcomes.Count(inbox.OutcomeDuplicate))
	require.Equal(t, []string{"/orders evt-1", "/orders evt-2"}, brokertest.Keys(t, s.pool, s.inboxTable, "ledger"))
	rows, distinct := s.ledger.Counts(t)
	require.Equal(t, 2, rows)
	require.Equal(t, 2, distinct)
}

// A record with no id at all, keyed by its position: read again (no consumer group, so
// from the oldest offset), it is skipped.
func TestKafkaPositionKey(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	s := newSetup(t)
	topic := brokertest.Name("position")
	brokertest.CreateTopic(t, brokers, topic, 1)
	_, offset, err := rawKafkaProducer(t, brokers).SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("no id")})
	require.NoError(t, err)

	var outcomes brokertest.Outcomes
	ib := s.inbox(t, kafkakey.Position, &outcomes)
	read := func(want inbox.Outcome) {
		rec := &recorder{}
		stop := runRouter(t, func(r *message.Router) {
			r.AddMiddleware(rec.middleware, ib.Middleware)
			r.AddConsumerHandler("ledger", topic, kafkaSubscriber(t, brokers, "", nil), func(m *message.Message) error {
				return s.ledger.Apply(m.Context(), "kafka", string(m.Payload))
			})
		})
		require.Eventually(t, func() bool { return outcomes.Count(want) >= 1 }, wait, 10*time.Millisecond)
		stop()
		require.Len(t, rec.all(), 1)
		require.Empty(t, rec.all()[0].UUID, "a non-Watermill record has no UUID")
	}
	read(inbox.OutcomeProcessed)
	read(inbox.OutcomeDuplicate)
	require.Equal(t, []string{fmt.Sprintf("%s/0/%d", topic, offset)}, brokertest.Keys(t, s.pool, s.inboxTable, "ledger"))
	require.Equal(t, 1, s.ledger.Applied(t, "no id"))
}
