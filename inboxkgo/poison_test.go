package inboxkgo_test

import (
	"context"

	"errors"
	"fmt"
	"github.com/IBM/sarama"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxkgo"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

func TestDefaultOnError(t *testing.T) {
	t.Parallel()
	r := &kgo.Record{Topic: "orders"}
	transient := errors.New("connection refused")
	poison := inbox.MarkPermanent(errors.New("unparsable payload"))
	for _, tc := range []struct {
		name string
		f    inboxkgo.Failure
		want inboxkgo.Action
	}{
		{"a record without a key", inboxkgo.Failure{Record: r, Err: &inbox.BatchItemError{Err: inbox.ErrNoKey}}, inboxkgo.Skip},
		{"a rewound offset", inboxkgo.Failure{Record: r, Err: &inbox.BatchItemError{Err: inbox.ErrOffsetRewound}}, inboxkgo.Stop},
		{"a record the handler refuses for good", inboxkgo.Failure{Record: r, Err: &inboxkgo.RecordError{Record: r, Err: poison}}, inboxkgo.Skip},
		{"a record the handler could not process yet", inboxkgo.Failure{Record: r, Err: &inboxkgo.RecordError{Record: r, Err: transient}}, inboxkgo.Retry},
		{"the database down", inboxkgo.Failure{Err: transient}, inboxkgo.Retry},
		{"a contended key", inboxkgo.Failure{Err: fmt.Errorf("claim: %w", inbox.ErrContended)}, inboxkgo.Retry},
		{"a batch the handler refuses for good", inboxkgo.Failure{Err: poison}, inboxkgo.Stop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, inboxkgo.DefaultOnError(context.Background(), tc.f))
		})
	}
}

// destination is a Destination that keeps the ids of what it took; its first Accept
// fails, as a dead-letter topic that is not reachable for a moment.
type destination struct {
	mu      sync.Mutex
	failed  bool
	taken   []string
	reasons []error
}

func (d *destination) Accept(_ context.Context, r *kgo.Record, reason error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.failed {
		d.failed = true
		return errors.New("dead-letter topic unreachable")
	}
	d.taken = append(d.taken, header(r, "id"))
	d.reasons = append(d.reasons, reason)
	return nil
}

func (d *destination) ids() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.taken...)
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// Records of three kinds on two partitions: good ones, ones without a key (key mode
// refuses them: ErrNoKey), ones the handler refuses for good (a permanent RecordError);
// the handler also fails once for the whole batch, transiently, and the destination
// refuses its first record. With DefaultOnError, Run retries, skips the poison records
// to the destination and keeps going: every good record applied once, every poison one
// taken by the destination once, none applied.
func TestRunSkipsPoisonRecords(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	for _, offsets := range []bool{false, true} {
		t.Run(map[bool]string{false: "keys", true: "offsets"}[offsets], func(t *testing.T) {
			t.Parallel()
			b := newBilling(t)
			ib, ledger := b.ib, b.ledger
			topic := brokertest.Name("kgopoison")
			brokertest.CreateTopic(t, brokers, topic, 2)
			producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			require.NoError(t, err)
			t.Cleanup(producer.Close)

			const n = 40
			var good, poison []string
			for i := range n {
				id := "r" + strconv.Itoa(i)
				rec := &kgo.Record{Topic: topic, Partition: int32(i % 2), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
				switch {
				case i%10 == 3 && !offsets: // no key: offset mode needs none
					poison = append(poison, id)
				case i%10 == 7:
					rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "poison", Value: []byte("yes")}, kgo.RecordHeader{Key: inboxkgo.WatermillUUIDHeader, Value: []byte(id)})
					poison = append(poison, id)
				default:
					rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: inboxkgo.WatermillUUIDHeader, Value: []byte(id)})
					good = append(good, id)
				}
				require.NoError(t, producer.ProduceSync(context.Background(), rec).FirstErr())
			}

			dest := &destination{}
			var mu sync.Mutex
			calls := 0
			cfg := inboxkgo.Config{Inbox: ib, Consumer: "billing", Offsets: offsets, MaxPollRecords: 8, Skip: dest, MinBackoff: 10 * time.Millisecond,
				Handle: func(ctx context.Context, records []*kgo.Record) error {
					mu.Lock()
					calls++
					first := calls == 1
					mu.Unlock()
					if first {
						return errors.New("provider timed out")
					}
					for _, r := range records {
						if header(r, "poison") != "" {
							return &inboxkgo.RecordError{Record: r, Err: inbox.MarkPermanent(errors.New("unparsable payload"))}
						}
						if err := ledger.Apply(ctx, "kgo", header(r, "id")); err != nil {
							return err
						}
					}
					return nil
				}}
			if !offsets {
				cfg.Key = inboxkgo.WatermillUUID
			}
			c, err := inboxkgo.New(cfg)
			require.NoError(t, err)
			cl := groupClient(t, c, brokers, topic)
			t.Cleanup(cl.Close)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx, cl) }()
			require.Eventually(t, func() bool {
				_, distinct := ledger.Counts(t)
				return distinct == len(good) && len(dest.ids()) == len(poison)
			}, time.Minute, 20*time.Millisecond)
			cancel()
			require.NoError(t, <-done, "Run kept going past the poison records, and returned nil when its context ended")

			rows, distinct := ledger.Counts(t)
			require.Equal(t, [2]int{len(good), len(good)}, [2]int{rows, distinct}, "every good record applied once")
			require.ElementsMatch(t, poison, dest.ids(), "every poison record taken once, nothing else")
			for _, id := range poison {
				require.Zero(t, ledger.Applied(t, id))
			}
			if offsets {
				stored, err := ib.Offsets(context.Background(), "billing")
				require.NoError(t, err)
				var next int64
				for _, o := range stored {
					next += o.Next
				}
				require.EqualValues(t, n, next, "the offsets moved past every record, the skipped ones included")
			} else {
				keys := brokertest.Keys(t, b.pool, b.table, "billing")
				require.Len(t, keys, n-n/10, "the good records' keys and the handler's poison ones (a redelivery is a duplicate); none for a record without a key")
			}
		})
	}
}

// A topic deleted and created again under the same name, in offset mode: its records
// sit at offsets the database has passed, in a log of another topic ID. DefaultOnError
// stops on the first (inbox.ErrOffsetRewound) rather than skip the partition's records
// one by one; once an operator resets the stored offset, Run takes them.
func TestRunStopsOnARewoundOffset(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	b := newBilling(t)
	ib, ledger := b.ib, b.ledger
	topic := brokertest.Name("kgorewound")
	brokertest.CreateTopic(t, brokers, topic, 1)
	produce := func(ids ...string) { // a client of its own each time: one would keep the deleted topic's ID
		producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		require.NoError(t, err)
		defer producer.Close()
		for _, id := range ids {
			require.NoError(t, producer.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}).FirstErr())
		}
	}
	consume := func(ctx context.Context) error {
		c, err := inboxkgo.New(inboxkgo.Config{Inbox: ib, Consumer: "billing", Offsets: true, MinBackoff: 10 * time.Millisecond,
			Handle: func(ctx context.Context, records []*kgo.Record) error {
				for _, r := range records {
					if err := ledger.Apply(ctx, "kgo", header(r, "id")); err != nil {
						return err
					}
				}
				return nil
			}})
		require.NoError(t, err)
		cl := groupClient(t, c, brokers, topic)
		defer cl.Close()
		return c.Run(ctx, cl)
	}
	applied := func(n int) func() bool {
		return func() bool { _, distinct := ledger.Counts(t); return distinct == n }
	}

	produce("a0", "a1", "a2", "a3", "a4")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consume(ctx) }()
	require.Eventually(t, applied(5), time.Minute, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	recreateTopic(t, brokers, topic)
	produce("b0", "b1", "b2")
	runCtx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	err := consume(runCtx)
	require.ErrorIs(t, err, inbox.ErrOffsetRewound, "Run stops on the first record of the new log")
	require.ErrorContains(t, err, "inbox offsets reset")
	require.Zero(t, ledger.Applied(t, "b0"))

	_, err = ib.SetOffset(context.Background(), "billing", topic, 0, 0) // `inbox offsets reset --to 0`
	require.NoError(t, err)
	go func() { done <- consume(runCtx) }()
	require.Eventually(t, applied(8), time.Minute, 20*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	rows, distinct := ledger.Counts(t)
	require.Equal(t, [2]int{8, 8}, [2]int{rows, distinct})
}

// recreateTopic deletes topic and creates it again, empty, with one partition.
func recreateTopic(t *testing.T, brokers []string, topic string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.DeleteTopic(topic))
	require.Eventually(t, func() bool {
		return admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false) == nil
	}, 30*time.Second, 50*time.Millisecond, "the topic created again")
}
