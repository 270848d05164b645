package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// The recipe on a real broker: RabbitMQ, through watermill-amqp v3's durable queues. Its
// publisher does not declare queues, so the poison queue (and the receipts' queue) is
// declared first, as the README says: a message published to a queue that does not exist
// is dropped by RabbitMQ without a word.
func TestRecipeRabbitMQ(t *testing.T) {
	t.Parallel()
	url := brokertest.AMQPURL(t)
	orders, receiptsQueue, poisonQueue := brokertest.Name("orders"), brokertest.Name("receipts"), brokertest.Name("orders_poison")
	for _, q := range []string{orders, receiptsQueue, poisonQueue} {
		brokertest.DeleteQueueOnCleanup(t, url, q)
	}
	sub := amqpSubscriber(t, "v3", url, orders) // declares the orders queue
	// Declare the poison queue before anything is poisoned: the publisher will not.
	poisonSub := amqpSubscriber(t, "v3", url, poisonQueue)
	receiptsSub := amqpSubscriber(t, "v3", url, receiptsQueue)
	pub := amqpPublisher(t, "v3", url)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	poisoned, err := poisonSub.Subscribe(ctx, poisonQueue)
	require.NoError(t, err)
	receipts, err := receiptsSub.Subscribe(ctx, receiptsQueue)
	require.NoError(t, err)

	w := newRecipeWorld(t, sub, pub, orders, receiptsQueue, poisonQueue, time.Second)
	checkRecipe(t, w, pub, orders, receipts, poisoned)
}

// Why the poison queue must be declared: with it missing, a poisoned message is acked
// (PoisonQueue's publish "succeeded") and gone: RabbitMQ dropped it, and no queue holds it.
func TestRabbitMQPoisonQueueNotDeclaredDropsTheMessage(t *testing.T) {
	t.Parallel()
	url := brokertest.AMQPURL(t)
	orders, poisonQueue := brokertest.Name("orders"), brokertest.Name("undeclared_poison")
	brokertest.DeleteQueueOnCleanup(t, url, orders)
	brokertest.DeleteQueueOnCleanup(t, url, poisonQueue)
	sub := amqpSubscriber(t, "v3", url, orders)
	pub := amqpPublisher(t, "v3", url)
	s := newSetup(t)
	var outcomes brokertest.Outcomes
	ib, err := inbox.New(inbox.Config{Store: s.store, Consumer: "billing", Observer: &outcomes})
	require.NoError(t, err)
	rec := &recorder{}
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(rec.middleware)
		require.NoError(t, addRecipe(r, ib, pub, poisonQueue, time.Second))
		r.AddConsumerHandler("billing", orders, sub, func(*message.Message) error { return nil })
	})
	require.NoError(t, pub.Publish(orders, message.NewMessage("", []byte("no key"))))
	require.Eventually(t, func() bool { return len(rec.all()) == 1 }, wait, 10*time.Millisecond)
	require.NoError(t, rec.all()[0].Err, "poisoned: the router acks it")
	require.Equal(t, 1, outcomes.Count(inbox.OutcomeNoKey))

	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclarePassive(poisonQueue, true, false, false, false, nil)
	require.Error(t, err, "no poison queue exists: the poisoned message went nowhere")
	q, err := func() (amqp091.Queue, error) {
		ch, err := conn.Channel()
		if err != nil {
			return amqp091.Queue{}, err
		}
		defer ch.Close()
		return ch.QueueDeclarePassive(orders, true, false, false, false, nil)
	}()
	require.NoError(t, err)
	require.Zero(t, q.Messages, "and it is not in its own queue either")
}
