package inboxkgo_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxkgo"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// billing is a test's own inbox, with its store on a fresh table, and a ledger for its
// handlers, on the test PostgreSQL.
type billing struct {
	ib     *inbox.Inbox
	ledger brokertest.Ledger
	pool   *pgxpool.Pool
	table  string // the inbox's
}

func newBilling(t *testing.T) billing {
	t.Helper()
	b := billing{pool: brokertest.PgPool(t), table: brokertest.Name("inbox")}
	store := brokertest.Store(t, b.pool, b.table, true)
	b.ledger = brokertest.NewLedger(t, b.pool, brokertest.Name("ledger"), true)
	var err error
	b.ib, err = inbox.New(inbox.Config{Store: store})
	require.NoError(t, err)
	return b
}

// groupClient returns c's client in a new consumer group on topic, read from its start
// with short fetch waits. The caller closes it.
func groupClient(t *testing.T, c *inboxkgo.Consumer, brokers []string, topic string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(brokertest.Name("group")), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))...)
	require.NoError(t, err)
	return cl
}

func TestNewNamesTheField(t *testing.T) {
	t.Parallel()
	handle := func(context.Context, []*kgo.Record) error { return nil }
	for _, tc := range []struct {
		name string
		cfg  inboxkgo.Config
		want string
	}{
		{"no inbox", inboxkgo.Config{Consumer: "c", Key: inboxkgo.WatermillUUID, Handle: handle}, "Inbox is nil"},
		{"no consumer", inboxkgo.Config{Inbox: &inbox.Inbox{}, Key: inboxkgo.WatermillUUID, Handle: handle}, "Consumer is empty"},
		{"no key in key mode", inboxkgo.Config{Inbox: &inbox.Inbox{}, Consumer: "c", Handle: handle}, "Key is nil"},
		{"a key in offset mode", inboxkgo.Config{Inbox: &inbox.Inbox{}, Consumer: "c", Offsets: true, Key: inboxkgo.WatermillUUID, Handle: handle}, "Key is set in offset mode"},
		{"no handler", inboxkgo.Config{Inbox: &inbox.Inbox{}, Consumer: "c", Offsets: true}, "Handle is nil"},
		{"negative batch", inboxkgo.Config{Inbox: &inbox.Inbox{}, Consumer: "c", Offsets: true, Handle: handle, MaxPollRecords: -1}, "MaxPollRecords"},
		{"backoffs the wrong way round", inboxkgo.Config{Inbox: &inbox.Inbox{}, Consumer: "c", Offsets: true, Handle: handle, MinBackoff: time.Minute, MaxBackoff: time.Second}, "MinBackoff is 1m0s and MaxBackoff 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := inboxkgo.New(tc.cfg)
			require.ErrorContains(t, err, "inboxkgo: invalid config: "+tc.want)
		})
	}
}

func TestKeysAndPositions(t *testing.T) {
	t.Parallel()
	r := &kgo.Record{Topic: "orders", Partition: 3, Offset: 42, LeaderEpoch: 7, Timestamp: time.UnixMilli(1_700_000_000_000),
		Headers: []kgo.RecordHeader{{Key: "_watermill_message_uuid", Value: []byte("u-1")}, {Key: "ce_id", Value: []byte("evt-1")}}}
	item, err := inboxkgo.WatermillUUID(r)
	require.NoError(t, err)
	require.Equal(t, "u-1", item.Key)
	item, err = inboxkgo.Header("ce_id")(r)
	require.NoError(t, err)
	require.Equal(t, "evt-1", item.Key)
	_, err = inboxkgo.Header("missing")(r)
	require.ErrorIs(t, err, inbox.ErrNoKey)
	require.Equal(t, inbox.Position{Topic: "orders", Partition: 3, Offset: 42, LeaderEpoch: 7, Timestamp: r.Timestamp}, inboxkgo.Position(r))
	r.LeaderEpoch = -5
	require.Equal(t, inbox.NoLeaderEpoch, inboxkgo.Position(r).LeaderEpoch)
}

// A batch whose handler fails, with an OnError that stops: Run moves the partitions back
// to its first records and returns the error; the next Run gets the same records, and
// each is applied once.
func TestRunRewindsAFailedBatch(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	for _, offsets := range []bool{false, true} {
		t.Run(map[bool]string{false: "keys", true: "offsets"}[offsets], func(t *testing.T) {
			t.Parallel()
			b := newBilling(t)
			ib, ledger := b.ib, b.ledger
			topic := brokertest.Name("kgorewind")
			brokertest.CreateTopic(t, brokers, topic, 1)
			pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.DefaultMarshaler{}}, watermill.NopLogger{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = pub.Close() })
			const n = 5
			for range n {
				require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
			}

			var mu sync.Mutex
			calls := 0
			boom := errors.New("provider timed out")
			cfg := inboxkgo.Config{Inbox: ib, Consumer: "billing", Offsets: offsets,
				OnError: func(context.Context, inboxkgo.Failure) inboxkgo.Action { return inboxkgo.Stop },
				Handle: func(ctx context.Context, records []*kgo.Record) error {
					mu.Lock()
					calls++
					first := calls == 1
					mu.Unlock()
					for _, r := range records {
						item, err := inboxkgo.WatermillUUID(r)
						if err != nil {
							return err
						}
						if err := ledger.Apply(ctx, "kgo", item.Key); err != nil {
							return err
						}
					}
					if first {
						return boom
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

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.ErrorIs(t, c.Run(ctx, cl), boom)
			rows, _ := ledger.Counts(t)
			require.Zero(t, rows, "the failed batch rolled back")
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Run(runCtx, cl) }()
			require.Eventually(t, func() bool { _, distinct := ledger.Counts(t); return distinct == n }, 30*time.Second, 20*time.Millisecond)
			stop()
			require.NoError(t, <-done, "Run returns nil when its context ends")
			rows, distinct := ledger.Counts(t)
			require.Equal(t, [2]int{n, n}, [2]int{rows, distinct}, "the rewound records applied once")
		})
	}
}
