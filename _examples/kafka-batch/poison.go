package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxkgo"
)

// poison shows the loop past records it cannot process, through Config.OnError and
// Config.Skip (the defaults, DefaultOnError):
//   - key mode, a record without a key (a producer that forgot the header): skipped to
//     a dead-letter topic, the others of its batch credited once;
//   - offset mode, a topic deleted and created again: its records sit at offsets the
//     database has passed (inbox.ErrOffsetRewound), so Run stops rather than skip them;
//     the operator resets the stored offset (`inbox offsets reset --to 0`, here
//     Inbox.SetOffset), and Run credits them.
func poison(ctx context.Context, pool *pgxpool.Pool, ib *inbox.Inbox, brokers []string, step int) error {
	topic := fmt.Sprintf("refunds-%d", time.Now().UnixNano())
	deadLetters := topic + "-dead-letters"
	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
	if err != nil {
		return err
	}
	defer admin.Close()
	for _, t := range []string{topic, deadLetters} {
		if err := admin.CreateTopic(t, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
			return err
		}
		defer func() { _ = admin.DeleteTopic(t) }()
	}
	produce := func(records ...*kgo.Record) error { // a client of its own each time: one would keep a deleted topic's ID
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return err
		}
		defer cl.Close()
		return cl.ProduceSync(ctx, records...).FirstErr()
	}
	order := func(id string) *kgo.Record {
		return &kgo.Record{Topic: topic, Value: []byte("190"), Headers: []kgo.RecordHeader{{Key: inboxkgo.WatermillUUIDHeader, Value: []byte(id)}}}
	}
	credited := func(consumer string) (int64, error) {
		var cents int64
		err := pool.QueryRow(ctx, `SELECT coalesce(max(cents), 0) FROM example_batch_wallets WHERE consumer = $1`, consumer).Scan(&cents)
		return cents, err
	}

	// Key mode: the second record has no key.
	if err := produce(order("refund-1"), &kgo.Record{Topic: topic, Value: []byte("190")}, order("refund-3")); err != nil {
		return err
	}
	dlq, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer dlq.Close()
	skipped := 0
	deadLetter := inboxkgo.ToTopic(dlq, deadLetters)
	if err := consumeUntil(ctx, brokers, topic, inboxkgo.Config{Inbox: ib, Consumer: "refunds-keys", Key: inboxkgo.WatermillUUID,
		Handle: creditRecords("refunds-keys"),
		Skip: inboxkgo.DestinationFunc(func(ctx context.Context, r *kgo.Record, reason error) error {
			skipped++
			fmt.Printf("%d. key mode: record %d has no key: skipped to %s (%v)\n", step, r.Offset, deadLetters, reason)
			return deadLetter.Accept(ctx, r, reason)
		})}, 2); err != nil {
		return err
	}
	cents, err := credited("refunds-keys")
	if err != nil || skipped != 1 || cents != 2*190 {
		return errors.Join(err, fmt.Errorf("key mode: %d skipped, %d cents credited", skipped, cents))
	}
	fmt.Printf("%d. key mode: the loop kept going: the 2 other refunds credited once, %d.%02d\n", step+1, cents/100, cents%100)

	// Offset mode: the topic consumed, then deleted and created again with new records.
	cfg := inboxkgo.Config{Inbox: ib, Consumer: "refunds-offsets", Offsets: true, Handle: creditRecords("refunds-offsets")}
	if err := consumeUntil(ctx, brokers, topic, cfg, 3); err != nil {
		return err
	}
	if err := admin.DeleteTopic(topic); err != nil {
		return err
	}
	for admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false) != nil {
		time.Sleep(50 * time.Millisecond) // the deletion takes a moment
	}
	if err := produce(order("refund-4"), order("refund-5")); err != nil {
		return err
	}
	err = consumeUntil(ctx, brokers, topic, cfg, 0)
	if !errors.Is(err, inbox.ErrOffsetRewound) {
		return fmt.Errorf("offset mode: the re-created topic's records were not refused: %v", err)
	}
	fmt.Printf("%d. offset mode: the topic was created again: Run stopped: %v\n", step+2, err)
	if _, err := ib.SetOffset(ctx, "refunds-offsets", topic, 0, 0); err != nil { // inbox offsets reset --consumer refunds-offsets --topic ... --partition 0 --to 0
		return err
	}
	if err := consumeUntil(ctx, brokers, topic, cfg, 2); err != nil {
		return err
	}
	if cents, err = credited("refunds-offsets"); err != nil || cents != 5*190 {
		return errors.Join(err, fmt.Errorf("offset mode: %d cents credited", cents))
	}
	fmt.Printf("%d. offset mode: after `inbox offsets reset --to 0` the new refunds were credited once: %d.%02d for 5 refunds\n", step+3, cents/100, cents%100)
	return nil
}

// consumeUntil runs cfg's loop on topic until it processed n records, and returns nil;
// or until Run returns an error, which it returns.
func consumeUntil(ctx context.Context, brokers []string, topic string, cfg inboxkgo.Config, n int) error {
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	processed := 0
	cfg.Committed = func(_ []*kgo.Record, res inbox.BatchResult) {
		if processed += res.Processed; processed >= n {
			cancel()
		}
	}
	c, err := inboxkgo.New(cfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(fmt.Sprintf("%s-%d", cfg.Consumer, time.Now().UnixNano())),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := c.Run(runCtx, cl); err != nil {
		return err
	}
	if processed < n {
		return fmt.Errorf("processed %d of %d records", processed, n)
	}
	return nil
}

// creditRecords credits 1.90 per new record to consumer's wallet, in one statement.
func creditRecords(consumer string) func(ctx context.Context, records []*kgo.Record) error {
	return func(ctx context.Context, records []*kgo.Record) error {
		tx, err := inbox.RequireTx[pgx.Tx](ctx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO example_batch_wallets (consumer, cents) VALUES ($1, 190 * $2)
			ON CONFLICT (consumer) DO UPDATE SET cents = example_batch_wallets.cents + EXCLUDED.cents`, consumer, len(records))
		return err
	}
}
