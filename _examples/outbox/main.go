// Command outbox runs an inbox and an outbox together, on a real PostgreSQL, Kafka and
// RabbitMQ:
//
//	Kafka (orders) → billing (inbox; credits a wallet; emits CashbackCredited through the
//	outbox, in the same transaction) → Forwarder → RabbitMQ (cashback) → notifications
//	(inbox; records a receipt)
//
// Then it delivers the order again and forwards the event again, as a consumer or a
// forwarder restarted before its offset commit would: each effect still happens once.
//
//	go run ./_examples/outbox
//
// It uses INBOX_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test),
// INBOX_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/) and KAFKA_BROKERS; when
// KAFKA_BROKERS is unset, the dev broker on 127.0.0.1:9092 (started with
// scripts/kafka-dev.sh when nothing listens there, and stopped at the end).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/exampleenv"
	"github.com/watermill-inbox/inbox/outbox"
)

const (
	forwarderTopic = "example_outbox" // the outbox table is watermill_example_outbox
	cashbackQueue  = "example_cashback"
)

type orderPaid struct {
	OrderID       string `json:"order_id"`
	CashbackCents int64  `json:"cashback_cents"`
}

type cashbackCredited struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	kafkaDev, err := exampleenv.StartKafka()
	if err != nil {
		return err
	}
	defer kafkaDev.Stop()
	brokers := kafkaDev.Brokers
	pool, err := pgxpool.New(ctx, exampleenv.PostgresDSN())
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := resetTables(ctx, pool); err != nil {
		return err
	}
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: "example_outbox_inbox"})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return err
	}
	ib, err := inbox.New(inbox.Config{Store: store}) // consumer = the handler's name
	if err != nil {
		return err
	}
	ob, err := outbox.New(outbox.Config{ForwarderTopic: forwarderTopic})
	if err != nil {
		return err
	}
	// The outbox table, before any handler publishes: a publisher bound to the inbox
	// transaction cannot create it.
	if err := ob.InitializeSchema(ctx, sql.BeginnerFromPgx(pool)); err != nil {
		return err
	}

	logger := watermill.NopLogger{}
	events := make(chan string, 16) // what each component did, in order
	runCtx, stop := context.WithCancel(ctx)
	defer stop()

	// Billing: Kafka → inbox → wallet credit + CashbackCredited in the outbox.
	ordersTopic := fmt.Sprintf("example_orders_%d", time.Now().UnixNano())
	kafkaSub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers: brokers, Unmarshaler: kafka.DefaultMarshaler{}, ConsumerGroup: "billing",
		OverwriteSaramaConfig: saramaConfig(),
	}, logger)
	if err != nil {
		return err
	}
	billing := func(msg *message.Message) error {
		var paid orderPaid
		if err := json.Unmarshal(msg.Payload, &paid); err != nil {
			return err
		}
		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
		if _, err := tx.Exec(msg.Context(), `UPDATE example_outbox_wallets SET cents = cents + $1 WHERE id = 'alice'`, paid.CashbackCents); err != nil {
			return err
		}
		payload, _ := json.Marshal(cashbackCredited{OrderID: paid.OrderID, Cents: paid.CashbackCents})
		// The id derives from the consumed message's claim (consumer and key): a rerun after
		// a rollback emits the same.
		id, err := outbox.MessageIDFromContext(msg.Context(), "CashbackCredited")
		if err != nil {
			return err
		}
		return ob.Publish(msg.Context(), cashbackQueue, message.NewMessage(id, payload))
	}

	// Notifications: RabbitMQ → inbox → a receipt.
	amqpURL := exampleenv.AMQPURL()
	if err := deleteQueue(amqpURL, cashbackQueue); err != nil { // left over from an earlier run
		return err
	}
	amqpCfg := amqp.NewDurableQueueConfig(amqpURL)
	amqpSub, err := amqp.NewSubscriber(amqpCfg, logger)
	if err != nil {
		return err
	}
	if err := amqpSub.SubscribeInitialize(cashbackQueue); err != nil { // the publisher does not declare it
		return err
	}
	amqpPub, err := amqp.NewPublisher(amqpCfg, logger)
	if err != nil {
		return err
	}
	notifications := func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
		_, err := tx.Exec(msg.Context(), `INSERT INTO example_outbox_receipts (event_uuid) VALUES ($1)`, msg.UUID)
		return err
	}

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	router.AddMiddleware(report(events), ib.Middleware)
	router.AddConsumerHandler("billing", ordersTopic, kafkaSub, billing)
	router.AddConsumerHandler("notifications", cashbackQueue, amqpSub, notifications)
	go func() { _ = router.Run(runCtx) }()
	<-router.Running()

	// The Forwarder: the outbox table → RabbitMQ. Its subscriber creates its offsets table.
	startForwarder := func(group string) (*forwarder.Forwarder, error) {
		sqlSub, err := sql.NewSubscriber(sql.BeginnerFromPgx(pool), sql.SubscriberConfig{
			ConsumerGroup: group, SchemaAdapter: ob.Config().SchemaAdapter,
			OffsetsAdapter: sql.DefaultPostgreSQLOffsetsAdapter{}, InitializeSchema: true,
			PollInterval: 100 * time.Millisecond,
		}, logger)
		if err != nil {
			return nil, err
		}
		fwd, err := forwarder.NewForwarder(sqlSub, reportingPublisher{amqpPub, events}, logger,
			forwarder.Config{ForwarderTopic: forwarderTopic})
		if err != nil {
			return nil, err
		}
		go func() { _ = fwd.Run(runCtx) }()
		<-fwd.Running()
		return fwd, nil
	}
	if _, err := startForwarder("forwarder"); err != nil {
		return err
	}

	kafkaPub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.DefaultMarshaler{}}, logger)
	if err != nil {
		return err
	}
	defer kafkaPub.Close()
	payload, _ := json.Marshal(orderPaid{OrderID: "order-1", CashbackCents: 190})
	order := message.NewMessage("order-1", payload)

	step := 0
	say := func(format string, args ...any) {
		step++
		fmt.Printf("%d. %s\n", step, fmt.Sprintf(format, args...))
	}
	await := func(n int) error {
		for range n {
			select {
			case e := <-events:
				say("%s", e)
			case <-time.After(30 * time.Second):
				return errors.New("nothing happened for 30s")
			}
		}
		return nil
	}

	say("OrderPaid order-1 published to Kafka topic %s", ordersTopic)
	if err := kafkaPub.Publish(ordersTopic, order.Copy()); err != nil {
		return err
	}
	if err := await(3); err != nil { // billing, forwarder, notifications
		return err
	}

	say("OrderPaid order-1 published again (a consumer restarted before its offset commit)")
	if err := kafkaPub.Publish(ordersTopic, order.Copy()); err != nil {
		return err
	}
	if err := await(1); err != nil {
		return err
	}

	say("a second forwarder reads the outbox from the start (a forwarder restarted before its offset commit)")
	if _, err := startForwarder("forwarder-restarted"); err != nil {
		return err
	}
	if err := await(2); err != nil { // forwarder, notifications
		return err
	}

	wallet, outboxRows, receipts, err := totals(ctx, pool)
	if err != nil {
		return err
	}
	say("wallet %d.%02d, %d outbox message, %d receipt: each effect happened once", wallet/100, wallet%100, outboxRows, receipts)
	stop()
	return router.Close()
}

// report is an outer middleware that tells the example what the inbox and handlers did.
func report(events chan<- string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			handler := message.HandlerNameFromCtx(msg.Context())
			switch {
			case err != nil:
				events <- fmt.Sprintf("%s: %s failed (%v), rolled back", handler, msg.UUID, err)
			case msg.Metadata.Get(inbox.MetadataDuplicate) == "true":
				events <- fmt.Sprintf("%s: %s is a duplicate, skipped", handler, msg.UUID)
			case handler == "billing":
				events <- fmt.Sprintf("billing: credited alice 1.90 and wrote CashbackCredited %s to the outbox, in one transaction",
					outbox.MessageID("billing", msg.UUID, "CashbackCredited")) // its key is its UUID (KeyFromUUID)
			default:
				events <- fmt.Sprintf("notifications: receipt recorded for CashbackCredited %s", msg.UUID)
			}
			return produced, err
		}
	}
}

// reportingPublisher tells the example what the Forwarder published.
type reportingPublisher struct {
	message.Publisher
	events chan<- string
}

func (p reportingPublisher) Publish(topic string, msgs ...*message.Message) error {
	err := p.Publisher.Publish(topic, msgs...)
	for _, m := range msgs {
		if err == nil {
			p.events <- fmt.Sprintf("forwarder: CashbackCredited %s moved from the outbox to RabbitMQ queue %s", m.UUID, topic)
		}
	}
	return err
}

func saramaConfig() *sarama.Config {
	sc := kafka.DefaultSaramaSubscriberConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	sc.Consumer.Group.Session.Timeout = 2 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	return sc
}

func deleteQueue(url, queue string) error {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return fmt.Errorf("RabbitMQ (INBOX_AMQP_URL): %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDelete(queue, false, false, false)
	return err
}

func resetTables(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `
		DROP TABLE IF EXISTS example_outbox_inbox, example_outbox_inbox_attempts, example_outbox_inbox_offsets, example_outbox_wallets,
			example_outbox_receipts, watermill_example_outbox, watermill_offsets_example_outbox;
		CREATE TABLE example_outbox_wallets (id text PRIMARY KEY, cents bigint NOT NULL);
		INSERT INTO example_outbox_wallets VALUES ('alice', 0);
		CREATE TABLE example_outbox_receipts (event_uuid text NOT NULL)`)
	return err
}

func totals(ctx context.Context, pool *pgxpool.Pool) (wallet int64, outboxRows, receipts int, err error) {
	err = pool.QueryRow(ctx, `SELECT
		(SELECT cents FROM example_outbox_wallets WHERE id = 'alice'),
		(SELECT count(*) FROM watermill_example_outbox),
		(SELECT count(*) FROM example_outbox_receipts)`).Scan(&wallet, &outboxRows, &receipts)
	return wallet, outboxRows, receipts, err
}
