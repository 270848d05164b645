package e2e_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// Two consumer processes share a NATS queue group or a Redis consumer group; one is
// SIGKILLed while it works through the messages, and a new process takes its place.
// What the killed one held unacked comes to the others (after AckWait, or through the
// claim loop after MaxIdleTime): every message applied exactly once.
func TestStreamsKilledConsumerReplaced(t *testing.T) {
	t.Parallel()
	for _, broker := range []string{"nats", "redis"} {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			args := helperArgs{Broker: broker, InboxTable: s.inboxTable, LedgerTable: s.ledgerTable, Consumer: "ledger"}
			var pub message.Publisher
			switch broker {
			case "nats":
				url := brokertest.NATSURL(t)
				args.NATSURL, args.NATS = url, newNATSConsumer(t, url)
				args.Topic = args.NATS.Stream
				pub = natsPublisher(t, url)
			case "redis":
				url := brokertest.RedisURL(t)
				args.RedisURL = url
				args.Topic, args.Group = newRedisStream(t, url)
				pub = redisPublisher(t, url)
			}
			const n = 40
			for range n {
				require.NoError(t, pub.Publish(args.Topic, message.NewMessage(watermill.NewUUID(), []byte("credit"))))
			}

			start := func(name string) *child {
				a := args
				a.RedisName = name
				return startChild(t, a)
			}
			a, b := start("a"), start("b")
			// Whichever of the two is working through the messages is killed, once it
			// processed 2: the other may take them all first (a Redis consumer reads a
			// batch at a time; a once processed 0 in 30 s while b took every message).
			var victim *child
			require.Eventually(t, func() bool {
				for _, c := range []*child{a, b} {
					if c.count("processed") >= 2 {
						victim = c
						return true
					}
				}
				return false
			}, wait, 10*time.Millisecond, "neither consumer processed 2 messages")
			victim.kill(t)
			if victim == b {
				a, b = b, a // a names the killed one below
			}
			c := start("c")
			require.Eventually(t, func() bool { _, distinct := s.ledger.Counts(t); return distinct == n }, wait, 20*time.Millisecond,
				"all %d messages applied", n)
			rows, distinct := s.ledger.Counts(t)
			require.Equal(t, n, distinct, "none lost")
			require.Equal(t, n, rows, "none applied twice")
			t.Logf("a processed %d before its SIGKILL; b processed %d, skipped %d; c processed %d, skipped %d",
				a.count("processed"), b.count("processed"), b.count("duplicate"), c.count("processed"), c.count("duplicate"))
		})
	}
}
