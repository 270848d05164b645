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
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	brokers, stopBroker, err := kafkaBrokers()
	if err != nil {
		return err
	}
	defer stopBroker()

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
	fmt.Println("2. postgres: tables inbox_example and example_ledger ready")

	var duplicates atomic.Int32
	ib, err := inbox.New(inbox.Config{Store: store, Observer: inbox.ObserverFunc(func(_ context.Context, o inbox.Observation) {
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
		var account string
		var amount int
		if _, err := fmt.Sscan(string(msg.Payload), &account, &amount); err != nil {
			return err
		}
		if _, err := tx.Exec(msg.Context(), `INSERT INTO example_ledger VALUES ($1, $2, $3)`, msg.UUID, account, amount); err != nil {
			return err
		}
		fmt.Printf("4. handler: credited %d to %s in the inbox transaction (message %s)\n", amount, account, msg.UUID)
		return nil
	})

	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	for duplicates.Load() < 1 && runCtx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	if duplicates.Load() < 1 {
		return errors.New("the second delivery did not arrive within a minute")
	}

	var rows, total int
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM example_ledger WHERE message_uuid = $1`, msgUUID).Scan(&rows, &total); err != nil {
		return err
	}
	fmt.Printf("6. ledger: %d row for message %s, %d credited: applied once\n", rows, msgUUID, total)
	return nil
}

// kafkaBrokers returns KAFKA_BROKERS, or starts the dev broker and returns its address
// and a function that stops it.
func kafkaBrokers() ([]string, func(), error) {
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		fmt.Printf("1. kafka: using KAFKA_BROKERS=%s\n", env)
		return strings.Split(env, ","), func() {}, nil
	}
	port := os.Getenv("KAFKA_DEV_PORT") // scripts/kafka-dev.sh reads it too
	if port == "" {
		port = "9092"
	}
	addr := "127.0.0.1:" + port
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		fmt.Printf("1. kafka: a broker already listens on %s, using it\n", addr)
		return []string{addr}, func() {}, nil
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "kafka-dev.sh")
	out, err := exec.Command(script, "start").CombinedOutput()
	if err != nil {
		return nil, nil, fmt.Errorf("starting the dev broker with %s: %v\n%s", script, err, out)
	}
	fmt.Printf("1. kafka: started the dev broker (cmd/kafka-dev) on %s\n", addr)
	return []string{addr}, func() {
		_ = exec.Command(script, "stop").Run()
		fmt.Println("7. kafka: stopped the dev broker")
	}, nil
}
