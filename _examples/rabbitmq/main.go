// Command rabbitmq shows the inbox with RabbitMQ: a Watermill Router consumes a durable
// queue, the handler writes a PostgreSQL ledger through the transaction the inbox put in
// the message context, and a second delivery of the same message is skipped, for a
// Watermill message (keyed by its UUID) and for one from a plain AMQP producer (keyed by
// its message_id property, which amqpkey.Marshaler keeps).
//
//	go run ./_examples/rabbitmq
//
// RabbitMQ comes from INBOX_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/),
// PostgreSQL from INBOX_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test).
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/amqpkey"
	"github.com/watermill-inbox/inbox/internal/exampleenv"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	url := exampleenv.AMQPURL()
	ledger, err := exampleenv.OpenLedger(ctx)
	if err != nil {
		return err
	}
	defer ledger.Close()
	fmt.Println("1. postgres: tables inbox_example and example_ledger ready")

	var processed, duplicates atomic.Int32
	ib, err := inbox.New(inbox.Config{
		Store: ledger.Store,
		// Watermill messages carry a UUID; other producers often set message_id.
		Key: inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents, amqpkey.MessageID),
		Observer: inbox.ObserverFunc(func(_ context.Context, o inbox.Observation) {
			switch o.Outcome {
			case inbox.OutcomeProcessed:
				processed.Add(1)
			case inbox.OutcomeDuplicate:
				duplicates.Add(1)
				fmt.Printf("4. inbox: duplicate delivery for consumer %q skipped, the handler was not called\n", o.Consumer)
			}
		}),
	})
	if err != nil {
		return err
	}

	// amqpkey.Marshaler keeps the message_id property and the redelivered flag, and
	// turns headers such as x-death into strings instead of failing on them.
	queue := fmt.Sprintf("payments-%d", time.Now().UnixNano())
	cfg := amqp.NewDurableQueueConfig(url)
	cfg.Marshaler = amqpkey.Marshaler{Inner: amqp.DefaultMarshaler{}}
	sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(queue); err != nil { // declare the queue before publishing
		return err
	}
	defer deleteQueue(url, queue)
	pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()

	// Each message is sent twice, as a producer retry (or a consumer that died between
	// its database commit and its ack) would deliver it.
	msgUUID := watermill.NewUUID()
	for range 2 {
		if err := pub.Publish(queue, message.NewMessage(msgUUID, []byte("alice 42"))); err != nil {
			return err
		}
	}
	fmt.Printf("2. rabbitmq: published Watermill message %s twice to queue %s\n", msgUUID, queue)
	invoiceID := fmt.Sprintf("invoice-%d", time.Now().UnixNano())
	if err := publishPlain(ctx, url, queue, amqp091.Publishing{MessageId: invoiceID, Body: []byte("bob 10")}, 2); err != nil {
		return err
	}
	fmt.Printf("2. rabbitmq: published a plain AMQP message with message_id %s twice\n", invoiceID)

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddMiddleware(ib.Middleware)
	router.AddConsumerHandler("payments", queue, sub, func(msg *message.Message) error {
		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
		if !ok {
			return errors.New("no inbox transaction in the context")
		}
		ref := cmp.Or(msg.UUID, msg.Metadata.Get(amqpkey.MetadataMessageID))
		account, amount, err := exampleenv.Credit(msg.Context(), tx, ref, msg.Payload)
		if err != nil {
			return err
		}
		fmt.Printf("3. handler: credited %d to %s in the inbox transaction (message %s)\n", amount, account, ref)
		return nil
	})

	if err := exampleenv.RunUntil(ctx, router, "the second deliveries did not arrive", func() bool {
		return processed.Load() >= 2 && duplicates.Load() >= 2
	}); err != nil {
		return err
	}

	return ledger.CheckAppliedOnce(ctx, 5, msgUUID, invoiceID)
}

// publishPlain publishes p times times with amqp091 directly, as a non-Watermill
// producer would.
func publishPlain(ctx context.Context, url, queue string, p amqp091.Publishing, times int) error {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	for range times {
		if err := ch.PublishWithContext(ctx, "", queue, false, false, p); err != nil {
			return err
		}
	}
	return nil
}

func deleteQueue(url, queue string) {
	if conn, err := amqp091.Dial(url); err == nil {
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
		}
	}
}
