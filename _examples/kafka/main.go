// Command kafka shows the inbox with Kafka: a Watermill Router consumes a topic in a
// consumer group, the handler writes a PostgreSQL ledger through the transaction the
// inbox put in the message context, and a second delivery of the same message is
// skipped.
//
//	go run ./_examples/kafka
//
// It uses KAFKA_BROKERS when set; otherwise it starts the dev broker (cmd/kafka-dev, via
// scripts/kafka-dev.sh) on 127.0.0.1:9092 (or $KAFKA_DEV_PORT) and stops it at the end. PostgreSQL comes from
// INBOX_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/exampleenv"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	kafkaDev, err := exampleenv.StartKafka()
	if err != nil {
		return err
	}
	defer func() {
		if kafkaDev.Stop() {
			fmt.Println("7. kafka: stopped the dev broker")
		}
	}()
	fmt.Println("1. kafka: " + kafkaDev.How)
	brokers := kafkaDev.Brokers

	ledger, err := exampleenv.OpenLedger(ctx)
	if err != nil {
		return err
	}
	defer ledger.Close()
	fmt.Println("2. postgres: tables inbox_example and example_ledger ready")

	var duplicates atomic.Int32
	ib, err := inbox.New(inbox.Config{Store: ledger.Store, Observer: inbox.ObserverFunc(func(_ context.Context, o inbox.Observation) {
		if o.Outcome == inbox.OutcomeDuplicate {
			duplicates.Add(1)
			// Duplicates never reach the handler: this is where they show.
			fmt.Printf("5. inbox: duplicate delivery for consumer %q skipped, the handler was not called\n", o.Consumer)
		}
	})})
	if err != nil {
		return err
	}

	// The same message published twice: what a producer retry, or a consumer that died
	// between its database commit and its offset commit, looks like to the handler.
	topic := fmt.Sprintf("payments-%d", time.Now().UnixNano())
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.DefaultMarshaler{}}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	msgUUID := watermill.NewUUID()
	for range 2 {
		if err := pub.Publish(topic, message.NewMessage(msgUUID, []byte("alice 42"))); err != nil {
			return err
		}
	}
	fmt.Printf("3. kafka: published message %s twice to %s\n", msgUUID, topic)

	sc := kafka.DefaultSaramaSubscriberConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, Unmarshaler: kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: sc, ConsumerGroup: "example"}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddMiddleware(ib.Middleware)
	router.AddConsumerHandler("payments", topic, sub, func(msg *message.Message) error {
		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
		if !ok {
			return errors.New("no inbox transaction in the context")
		}
		account, amount, err := exampleenv.Credit(msg.Context(), tx, msg.UUID, msg.Payload)
		if err != nil {
			return err
		}
		fmt.Printf("4. handler: credited %d to %s in the inbox transaction (message %s)\n", amount, account, msg.UUID)
		return nil
	})
	if err := exampleenv.RunUntil(ctx, router, "the second delivery did not arrive", func() bool { return duplicates.Load() >= 1 }); err != nil {
		return err
	}
	return ledger.CheckAppliedOnce(ctx, 6, msgUUID)
}
