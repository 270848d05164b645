package e2e_test

import (
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// BenchmarkEndToEnd: router throughput, broker → handler → PostgreSQL, with the inbox
// middleware against the same handler in its own plain transaction, in turns (plain,
// inbox, plain, inbox). Each turn pre-publishes the messages on a fresh topic or queue
// and times from the first handled message to the last, so that neither publishing nor
// the router's start counts. 100 messages a turn, 2000 with INBOX_BENCH_FULL=1. The
// ratio is inbox over plain (see docs/benchmarks.md).
func BenchmarkEndToEnd(b *testing.B) {
	msgs := 100
	if os.Getenv("INBOX_BENCH_FULL") == "1" {
		msgs = 2000
	}
	type broker struct {
		name string
		pair func(b *testing.B, topic string) (message.Publisher, message.Subscriber)
	}
	brokers := []broker{
		{"kafka", func(b *testing.B, topic string) (message.Publisher, message.Subscriber) {
			brokers := brokertest.KafkaBrokers(b)
			return kafkaPublisher(b, brokers), kafkaSubscriber(b, brokers, "bench-"+topic, nil)
		}},
		{"rabbitmq", func(b *testing.B, queue string) (message.Publisher, message.Subscriber) {
			url := brokertest.AMQPURL(b)
			sub := amqpSubscriber(b, "v3", url, queue)
			return amqpPublisher(b, "v3", url), sub
		}},
	}
	for _, br := range brokers {
		b.Run(br.name, func(b *testing.B) {
			s := newSetup(b)
			ib := s.inbox(b, nil, nil)
			rates := map[bool][]float64{}
			for range b.N {
				for _, withInbox := range []bool{false, true, false, true} {
					topic := brokertest.Name("bench")
					pub, sub := br.pair(b, topic)
					rates[withInbox] = append(rates[withInbox], endToEnd(b, s, ib, pub, sub, topic, msgs, withInbox))
				}
			}
			plain, with := median(rates[false]), median(rates[true])
			b.ReportMetric(plain, "plain-msg/s")
			b.ReportMetric(with, "inbox-msg/s")
			b.ReportMetric(with/plain, "ratio")
		})
	}
}

// endToEnd publishes msgs messages on topic, runs a router over them, and returns the
// messages handled per second between the first and the last.
func endToEnd(b *testing.B, s setup, ib *inbox.Inbox, pub message.Publisher, sub message.Subscriber, topic string, msgs int, withInbox bool) float64 {
	b.Helper()
	for i := range msgs {
		msg := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		require.NoError(b, pub.Publish(topic, msg))
	}
	var handled atomic.Int64
	var first, last atomic.Int64
	done := make(chan struct{})
	count := func() {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		last.Store(now)
		if handled.Add(1) == int64(msgs) {
			close(done)
		}
	}
	var handler message.NoPublishHandlerFunc
	if withInbox {
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if err := s.ledger.Apply(msg.Context(), topic, msg.UUID); err != nil {
				return nil, err
			}
			return nil, nil
		})
		handler = func(msg *message.Message) error {
			_, err := h(msg)
			if err == nil {
				count()
			}
			return err
		}
	} else {
		handler = func(msg *message.Message) error {
			err := pgx.BeginFunc(msg.Context(), s.pool, func(tx pgx.Tx) error {
				return s.ledger.Apply(inbox.ContextWithTx(msg.Context(), tx), topic, msg.UUID)
			})
			if err == nil {
				count()
			}
			return err
		}
	}
	stop := runRouter(b, func(r *message.Router) {
		r.AddConsumerHandler("bench-"+topic, topic, sub, handler)
	})
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d messages handled after 2 minutes", handled.Load(), msgs)
	}
	stop()
	elapsed := time.Duration(last.Load() - first.Load())
	return float64(msgs-1) / elapsed.Seconds()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
