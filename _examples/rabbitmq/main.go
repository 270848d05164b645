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
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/amqpkey"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	url := os.Getenv("INBOX_AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	dsn := os.Getenv("INBOX_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}

	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: "inbox_example"})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_ledger (message_uuid text NOT NULL, account text NOT NULL, amount int NOT NULL)`); err != nil {
		return err
	}
	fmt.Println("1. postgres: tables inbox_example and example_ledger ready")

	var processed, duplicates atomic.Int32
	ib, err := inbox.New(inbox.Config{
		Store: store,
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
		var account string
		var amount int
		if _, err := fmt.Sscan(string(msg.Payload), &account, &amount); err != nil {
			return err
		}
		ref := msg.UUID
		if ref == "" {
			ref = msg.Metadata.Get(amqpkey.MetadataMessageID)
		}
		if _, err := tx.Exec(msg.Context(), `INSERT INTO example_ledger VALUES ($1, $2, $3)`, ref, account, amount); err != nil {
			return err
		}
		fmt.Printf("3. handler: credited %d to %s in the inbox transaction (message %s)\n", amount, account, ref)
		return nil
	})

	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	for processed.Load()+duplicates.Load() < 4 && runCtx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	if duplicates.Load() < 2 {
		return errors.New("the second deliveries did not arrive within a minute")
	}

	for _, ref := range []string{msgUUID, invoiceID} {
		var rows, total int
		if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM example_ledger WHERE message_uuid = $1`, ref).Scan(&rows, &total); err != nil {
			return err
		}
		fmt.Printf("5. ledger: %d row for message %s, %d credited: applied once\n", rows, ref, total)
	}
	return nil
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
