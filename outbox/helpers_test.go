package outbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
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
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/outbox"
)

// The tests run against a real PostgreSQL, RabbitMQ and Kafka (the dev broker of
// scripts/kafka-dev.sh). Outside CI a service that cannot be reached skips its tests,
// naming the variable to set; under CI (CI=true) it fails them. This package's Kafka and
// RabbitMQ setup is its own, a few lines each.

// postgresDSN is the test PostgreSQL's DSN, as sqltest reads it from the environment.
func postgresDSN() string { return sqltest.Databases()[0].DSN }

func amqpURL() string {
	if u := os.Getenv("INBOX_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

func pgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, postgresDSN())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		sqltest.Unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// dropLater drops the tables when the test ends.
func dropLater(t testing.TB, pool *pgxpool.Pool, tables ...string) {
	t.Cleanup(func() {
		for _, table := range tables {
			_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize())
		}
	})
}

// newInbox returns an Inbox on a fresh PostgresStore table, and the table's name.
func newInbox(t testing.TB, pool *pgxpool.Pool, consumer string) (*inbox.Inbox, string) {
	t.Helper()
	table := sqltest.Name("inbox")
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(context.Background()))
	dropLater(t, pool, table, table+"_attempts", table+"_offsets")
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: consumer})
	require.NoError(t, err)
	return ib, table
}

// newOutbox returns an Outbox on a fresh forwarder topic whose tables exist.
func newOutbox(t testing.TB, pool *pgxpool.Pool) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(outbox.Config{ForwarderTopic: sqltest.Name("outbox")})
	require.NoError(t, err)
	createOutboxSchema(t, pool, ob)
	return ob
}

// createOutboxSchema creates the outbox table up front, as a service does at startup: a
// publisher bound to a transaction cannot (watermill-sql rejects AutoInitializeSchema on
// a transaction). The Forwarder's subscriber creates its offsets table itself.
func createOutboxSchema(t testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox) {
	t.Helper()
	require.NoError(t, ob.InitializeSchema(context.Background(), sql.BeginnerFromPgx(pool)))
	topic := ob.Config().ForwarderTopic
	dropLater(t, pool, "watermill_"+topic, "watermill_offsets_"+topic)
}

// outboxSubscriber reads the outbox table, as the Forwarder's input.
func outboxSubscriber(t testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox, group string) *sql.Subscriber {
	t.Helper()
	sub, err := sql.NewSubscriber(sql.BeginnerFromPgx(pool), sql.SubscriberConfig{
		ConsumerGroup:    group,
		SchemaAdapter:    ob.Config().SchemaAdapter,
		OffsetsAdapter:   sql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true, // its offsets table; the outbox table exists already
		PollInterval:     50 * time.Millisecond,
		ResendInterval:   50 * time.Millisecond,
		RetryInterval:    50 * time.Millisecond,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// runForwarder runs a Forwarder from the outbox (as consumer group group) to out, until
// the test ends.
func runForwarder(t testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox, group string, out message.Publisher) {
	t.Helper()
	fwd, err := forwarder.NewForwarder(outboxSubscriber(t, pool, ob, group), out, watermill.NopLogger{},
		forwarder.Config{ForwarderTopic: ob.Config().ForwarderTopic, CloseTimeout: 5 * time.Second})
	require.NoError(t, err)
	runUntilCleanup(t, fwd.Run, fwd.Running(), fwd.Close)
}

// runUntilCleanup starts run in the background, waits until running is closed, and
// stops it with stop when the test ends.
func runUntilCleanup(t testing.TB, run func(context.Context) error, running chan struct{}, stop func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- run(context.Background()) }()
	select {
	case <-running:
	case err := <-done:
		t.Fatalf("stopped before running: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("not running after 20s")
	}
	t.Cleanup(func() {
		_ = stop()
		<-done
	})
}

// amqpQueue returns an AMQP config, publisher and subscriber for a fresh durable queue,
// declared before anything is published to it and deleted when the test ends.
func amqpQueue(t testing.TB) (string, *amqp.Publisher, *amqp.Subscriber) {
	t.Helper()
	conn, err := amqp091.Dial(amqpURL())
	if err != nil {
		sqltest.Unavailable(t, "RabbitMQ", "INBOX_AMQP_URL", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	queue := sqltest.Name("outbox_test")
	cfg := amqp.NewDurableQueueConfig(amqpURL())
	sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, sub.SubscribeInitialize(queue)) // the publisher does not declare it
	pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = pub.Close()
		_ = sub.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_ = ch.Close()
		}
	})
	return queue, pub, sub
}

// kafkaBrokers returns the dev broker's address, from KAFKA_BROKERS.
func kafkaBrokers(t testing.TB) []string {
	t.Helper()
	env := os.Getenv("KAFKA_BROKERS")
	if env == "" {
		sqltest.Unavailable(t, "Kafka", "KAFKA_BROKERS", fmt.Errorf("KAFKA_BROKERS is empty (start scripts/kafka-dev.sh and set KAFKA_BROKERS=127.0.0.1:9092)"))
	}
	brokers := strings.Split(env, ",")
	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
	if err != nil {
		sqltest.Unavailable(t, "Kafka", "KAFKA_BROKERS", err)
	}
	_ = admin.Close()
	return brokers
}

// deleteKafkaTopicLater deletes topic when the test ends.
func deleteKafkaTopicLater(t testing.TB, brokers []string, topic string) {
	t.Cleanup(func() {
		if admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig()); err == nil {
			_ = admin.DeleteTopic(topic)
			_ = admin.Close()
		}
	})
}

// kafkaSubscriber returns a subscriber in group with settings that suit the dev broker:
// read from the oldest offset, short polls, a 2 s session so a killed member's partitions
// move on quickly.
func kafkaSubscriber(brokers []string, group string) (*kafka.Subscriber, error) {
	sc := kafka.DefaultSaramaSubscriberConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	sc.Consumer.Group.Session.Timeout = 2 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	return kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               brokers,
		Unmarshaler:           kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: sc,
		ConsumerGroup:         group,
	}, watermill.NopLogger{})
}

func kafkaPublisher(t testing.TB, brokers []string) *kafka.Publisher {
	t.Helper()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.DefaultMarshaler{}}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// outcome is what the inbox did with one delivery, seen by an outer middleware.
type outcome struct {
	uuid      string
	duplicate bool
	err       error
}

// reportTo is an outer middleware that sends each delivery's outcome to outcomes.
func reportTo(outcomes chan<- outcome) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			outcomes <- outcome{uuid: msg.UUID, duplicate: msg.Metadata.Get(inbox.MetadataDuplicate) == "true", err: err}
			return produced, err
		}
	}
}

// receipts is the downstream consumer's table: one row per processed notification.
type receipts struct {
	pool  *pgxpool.Pool
	table string
}

func newReceipts(t testing.TB, pool *pgxpool.Pool) *receipts {
	t.Helper()
	r := &receipts{pool: pool, table: sqltest.Name("receipts")}
	_, err := pool.Exec(context.Background(), `CREATE TABLE `+pgx.Identifier{r.table}.Sanitize()+` (event_uuid text NOT NULL, payload text NOT NULL)`)
	require.NoError(t, err)
	dropLater(t, pool, r.table)
	return r
}

// handler records a receipt through the inbox transaction.
func (r *receipts) handler(msg *message.Message) error {
	tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
	if !ok {
		return fmt.Errorf("no inbox transaction")
	}
	_, err := tx.Exec(msg.Context(), `INSERT INTO `+pgx.Identifier{r.table}.Sanitize()+` VALUES ($1, $2)`, msg.UUID, string(msg.Payload))
	return err
}

// uuids returns the recorded event UUIDs, in insertion order.
func (r *receipts) uuids(t testing.TB) []string {
	t.Helper()
	rows, err := r.pool.Query(context.Background(), `SELECT event_uuid FROM `+pgx.Identifier{r.table}.Sanitize()+` ORDER BY ctid`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

// runNotifications runs the downstream consumer: sub → inbox (consumer "notifications")
// → a receipt, reporting every delivery to the returned channel.
func runNotifications(t testing.TB, pool *pgxpool.Pool, sub message.Subscriber, queue string, r *receipts) <-chan outcome {
	t.Helper()
	ib, _ := newInbox(t, pool, "notifications")
	outcomes := make(chan outcome, 64)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(reportTo(outcomes), ib.Middleware)
	router.AddConsumerHandler("notifications", queue, sub, r.handler)
	runUntilCleanup(t, router.Run, router.Running(), router.Close)
	return outcomes
}

// next returns the next outcome, failing the test after 20 s.
func next(t testing.TB, outcomes <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-outcomes:
		return o
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20s")
	}
	return outcome{}
}

// outboxRows returns the UUIDs of the messages in the outbox table (the original UUIDs,
// inside the Forwarder's envelopes), in order.
func outboxRows(t testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox) []string {
	t.Helper()
	table := pgx.Identifier{"watermill_" + ob.Config().ForwarderTopic}.Sanitize()
	rows, err := pool.Query(context.Background(), `SELECT payload->>'uuid' FROM `+table+` ORDER BY "offset"`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}
