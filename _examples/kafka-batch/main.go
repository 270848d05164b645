// Command kafka-batch shows a Kafka consumer loop on franz-go that takes records a batch
// at a time through the inbox (package inboxkgo): each poll is claimed in one
// statement and handled in one transaction, with one UPDATE for the whole batch, and
// committed before Kafka's offsets. A consumer that stops between the two commits
// leaves its last batch to be delivered again: in key mode the next consumer skips it
// by its keys; in offset mode it seeks to the offsets kept in the database and is not
// even given it. Then (poison.go) records the loop cannot process: one without a key,
// skipped to a dead-letter topic while the loop keeps going, and a topic deleted and
// created again, on which the loop stops until the offset is reset.
//
//	go run ./_examples/kafka-batch
//
// It uses KAFKA_BROKERS when set; otherwise the dev broker on 127.0.0.1:9092 (started
// with scripts/kafka-dev.sh when nothing listens there, and stopped at the end).
// PostgreSQL comes from INBOX_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test).
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxkgo"
	"github.com/watermill-inbox/inbox/internal/exampleenv"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

const orders = 250

func run() error {
	ctx := context.Background()
	kafkaDev, err := exampleenv.StartKafka()
	if err != nil {
		return err
	}
	defer kafkaDev.Stop()
	fmt.Println("1. kafka: " + kafkaDev.How)
	brokers := kafkaDev.Brokers
	pool, err := pgxpool.New(ctx, exampleenv.PostgresDSN())
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: "example_batch_inbox"})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return err
	}
	defer func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS example_batch_inbox, example_batch_inbox_attempts, example_batch_inbox_offsets, example_batch_wallets`)
	}()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_batch_wallets (consumer text PRIMARY KEY, cents bigint NOT NULL DEFAULT 0)`); err != nil {
		return err
	}
	ib, err := inbox.New(inbox.Config{Store: store})
	if err != nil {
		return err
	}

	topic := fmt.Sprintf("orders-%d", time.Now().UnixNano())
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.DefaultMarshaler{}}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	for range orders {
		if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("190"))); err != nil {
			return err
		}
	}
	fmt.Printf("2. kafka: published %d orders of 1.90 to %s\n", orders, topic)

	for i, mode := range []struct {
		consumer string
		offsets  bool
	}{{"billing-keys", false}, {"billing-offsets", true}} {
		if err := demo(ctx, pool, ib, brokers, topic, mode.consumer, mode.offsets, 3+3*i); err != nil {
			return fmt.Errorf("%s: %w", mode.consumer, err)
		}
	}
	return poison(ctx, pool, ib, brokers, 9) // records the loop cannot process: poison.go
}

// demo consumes the topic twice as one consumer: a first process that stops after its
// first batch's database commit, before the offset commit, then a second one that
// consumes the rest.
func demo(ctx context.Context, pool *pgxpool.Pool, ib *inbox.Inbox, brokers []string, topic, consumer string, offsets bool, step int) error {
	mode := "key mode"
	if offsets {
		mode = "offset mode"
	}
	credit := func(ctx context.Context, records []*kgo.Record) error {
		tx, err := inbox.RequireTx[pgx.Tx](ctx)
		if err != nil {
			return err
		}
		// One statement for the batch: what a batch consumer is for.
		_, err = tx.Exec(ctx, `INSERT INTO example_batch_wallets (consumer, cents) VALUES ($1, 190 * $2)
			ON CONFLICT (consumer) DO UPDATE SET cents = example_batch_wallets.cents + EXCLUDED.cents`, consumer, len(records))
		return err
	}
	skipped, total := 0, 0
	consume := func(stopAfterFirstCommit bool) error {
		runCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cfg := inboxkgo.Config{Inbox: ib, Consumer: consumer, Offsets: offsets, Handle: credit, MaxPollRecords: 100,
			Committed: func(records []*kgo.Record, res inbox.BatchResult) {
				total += res.Processed
				skipped += len(records) - res.Processed
				if stopAfterFirstCommit {
					cancel() // the offset commit that follows fails: as if the process died here
				} else if total >= orders {
					cancel()
				}
			}}
		if !offsets {
			cfg.Key = inboxkgo.WatermillUUID // the key the middleware would use: the message UUID
		}
		c, err := inboxkgo.New(cfg)
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(consumer), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))...)
		if err != nil {
			return err
		}
		defer cl.Close()
		return c.Run(runCtx, cl)
	}
	if err := consume(true); err != nil {
		return err
	}
	fmt.Printf("%d. %s: the first consumer committed a batch of %d in the database and stopped before committing its offsets\n", step, mode, total)
	if err := consume(false); err != nil {
		return err
	}
	if offsets {
		fmt.Printf("%d. %s: the next consumer sought to the offsets in the database: %d records delivered again\n", step+1, mode, skipped)
	} else {
		fmt.Printf("%d. %s: the next consumer got that batch again and skipped its %d records by their keys\n", step+1, mode, skipped)
	}
	var cents int64
	if err := pool.QueryRow(ctx, `SELECT cents FROM example_batch_wallets WHERE consumer = $1`, consumer).Scan(&cents); err != nil {
		return err
	}
	if total != orders || cents != 190*orders {
		return fmt.Errorf("processed %d of %d orders, %d cents credited", total, orders, cents)
	}
	fmt.Printf("%d. %s: %d orders, each credited once: %d.%02d\n", step+2, mode, total, cents/100, cents%100)
	return nil
}
