package e2e_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// One Watermill Router, two handlers behind the same inbox middleware: one on a Kafka
// topic, one on a RabbitMQ queue, both writing one PostgreSQL ledger through the
// transaction in the message context. Every message is published twice; each is
// applied once.
func TestOneRouterKafkaAndRabbitMQ(t *testing.T) {
	t.Parallel()
	brokers := brokertest.KafkaBrokers(t)
	url := brokertest.AMQPURL(t)
	s := newSetup(t)
	topic, queue := brokertest.Name("router"), brokertest.Name("router")
	brokertest.CreateTopic(t, brokers, topic, 4)
	brokertest.DeleteQueueOnCleanup(t, url, queue)
	amqpSub := amqpSubscriber(t, "v2", url, queue)

	const n = 10
	kafkaPub, amqpPub := kafkaPublisher(t, brokers), amqpPublisher(t, "v2", url)
	for range n {
		uuid := watermill.NewUUID()
		for range 2 { // the same message twice, as a producer retrying would
			require.NoError(t, kafkaPub.Publish(topic, message.NewMessage(uuid, []byte("kafka credit"))))
		}
		uuid = watermill.NewUUID()
		for range 2 {
			require.NoError(t, amqpPub.Publish(queue, message.NewMessage(uuid, []byte("amqp credit"))))
		}
	}

	var outcomes brokertest.Outcomes
	ib := s.inbox(t, nil, &outcomes)
	ledger := func(source string) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error { return s.ledger.Apply(msg.Context(), source, msg.UUID) }
	}
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(ib.Middleware)
		r.AddConsumerHandler("kafka-ledger", topic, kafkaSubscriber(t, brokers, brokertest.Name("group"), nil), ledger("kafka"))
		r.AddConsumerHandler("amqp-ledger", queue, amqpSub, ledger("amqp"))
	})
	require.Eventually(t, func() bool {
		return outcomes.Count(inbox.OutcomeProcessed)+outcomes.Count(inbox.OutcomeDuplicate) >= 4*n
	}, wait, 20*time.Millisecond)

	require.Equal(t, 2*n, outcomes.Count(inbox.OutcomeProcessed))
	require.Equal(t, 2*n, outcomes.Count(inbox.OutcomeDuplicate))
	require.Len(t, brokertest.Keys(t, s.pool, s.inboxTable, "kafka-ledger"), n)
	require.Len(t, brokertest.Keys(t, s.pool, s.inboxTable, "amqp-ledger"), n)
	rows, distinct := s.ledger.Counts(t)
	require.Equal(t, 2*n, rows, "each message applied once")
	require.Equal(t, 2*n, distinct)
}
