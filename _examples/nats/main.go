// Command nats shows the inbox with NATS JetStream: a Watermill Router consumes a stream
// through a durable consumer, the handler writes a PostgreSQL ledger through the
// transaction the inbox put in the message context, and a second delivery of the same
// message is skipped, for a Watermill message (keyed by its UUID) and for one a plain
// nats.go producer published (keyed by its Nats-Msg-Id header, which natskey.Unmarshaler
// keeps). A message JetStream delivered more than 5 times would go to a poison queue.
//
//	go run ./_examples/nats
//
// NATS comes from INBOX_NATS_URL (default nats://127.0.0.1:4222, JetStream enabled),
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
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/natskey"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	url := envOr("INBOX_NATS_URL", "nats://127.0.0.1:4222")
	pool, err := pgxpool.New(ctx, envOr("INBOX_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
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

	// The stream and its durable consumer, created here rather than by the subscriber:
	// nats.go deletes a consumer it created itself when the subscriber closes, and a
	// consumer that exists keeps its settings (AckWait) whatever a subscriber asks for.
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return err
	}
	stream := fmt.Sprintf("payments_%d", time.Now().UnixNano())
	if _, err := js.AddStream(&nats.StreamConfig{Name: stream, Subjects: []string{stream}}); err != nil {
		return err
	}
	defer func() { _ = js.DeleteStream(stream) }()
	const durable = "payments"
	if _, err := js.AddConsumer(stream, &nats.ConsumerConfig{
		Durable: durable, DeliverGroup: durable, DeliverSubject: nats.NewInbox(),
		AckPolicy: nats.AckExplicitPolicy, AckWait: 30 * time.Second, // JetStream redelivers what is not acked by then
	}); err != nil {
		return err
	}
	fmt.Printf("2. nats: stream %s with durable consumer %q (AckWait 30s)\n", stream, durable)

	// The same Watermill message twice (a producer retry, or a consumer that died between
	// its commit and its ack, looks the same to the handler).
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: url, Marshaler: &wmnats.NATSMarshaler{}}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	msgUUID := watermill.NewUUID()
	for range 2 {
		if err := pub.Publish(stream, message.NewMessage(msgUUID, []byte("alice 42"))); err != nil {
			return err
		}
	}
	fmt.Printf("3. nats: published Watermill message %s twice\n", msgUUID)
	// A plain nats.go producer sets Nats-Msg-Id: JetStream drops its retry within the
	// stream's duplicate window (2 minutes by default) and the inbox keys by it.
	plainID := fmt.Sprintf("order-7-paid-%d", time.Now().UnixNano()) // new each run: the inbox table outlives it
	for i := range 2 {
		m := nats.NewMsg(stream)
		m.Header.Set(nats.MsgIdHdr, plainID)
		m.Data = []byte("bob 7")
		ack, err := js.PublishMsg(m)
		if err != nil {
			return err
		}
		if i == 1 {
			fmt.Printf("4. nats: plain message %s published twice; JetStream dropped the second (duplicate: %v)\n", plainID, ack.Duplicate)
		}
	}
	return consume(js, pool, store, url, stream, durable, msgUUID, plainID)
}

func consume(js nats.JetStreamContext, pool *pgxpool.Pool, store *inbox.PostgresStore, url, stream, durable, msgUUID, plainID string) error {
	ib, err := inbox.New(inbox.Config{
		Store: store,
		// Watermill messages carry a UUID; plain NATS producers set Nats-Msg-Id.
		Key: inbox.FirstOf(inbox.KeyFromUUID, natskey.MsgID),
	})
	if err != nil {
		return err
	}
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL:              url,
		QueueGroupPrefix: durable,
		AckWaitTimeout:   25 * time.Second, // how long watermill-nats waits for the handler: below AckWait
		Unmarshaler:      natskey.Unmarshaler{},
		JetStream: wmnats.JetStreamConfig{
			DurablePrefix: durable,
			// Bind to the consumer created above; ManualAck, or nats.go acks every message
			// when watermill-nats stops waiting for it, committed or not.
			SubscribeOptions: []nats.SubOpt{nats.Bind(stream, durable), nats.ManualAck()},
		},
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: stream + "_poison", Subjects: []string{stream + "_poison"}}); err != nil {
		return err
	}
	defer func() { _ = js.DeleteStream(stream + "_poison") }()
	poisonPub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: url, Marshaler: &wmnats.NATSMarshaler{}}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer poisonPub.Close()
	poisonQueue, err := middleware.PoisonQueueWithFilter(poisonPub, stream+"_poison", func(err error) bool {
		return errors.Is(err, natskey.ErrTooManyDeliveries) || errors.Is(err, inbox.ErrNoKey)
	})
	if err != nil {
		return err
	}

	var processed, duplicates atomic.Int32
	var ackLost atomic.Bool
	// report prints what the inbox did with each delivery; for the plain message's first
	// delivery it then fails, as if the process died after the commit and before the ack:
	// JetStream delivers it again.
	report := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			n := msg.Metadata.Get(natskey.MetadataNumDelivered)
			key := msg.UUID
			if key == "" {
				key = msg.Metadata.Get(natskey.MetadataMsgID)
			}
			switch {
			case err != nil:
				fmt.Printf("   %s (delivery %s): failed: %v\n", key, n, err)
			case msg.Metadata.Get(inbox.MetadataDuplicate) == "true":
				duplicates.Add(1)
				fmt.Printf("   %s (delivery %s): duplicate, skipped: the handler was not called\n", key, n)
			default:
				processed.Add(1)
				if key == plainID && ackLost.CompareAndSwap(false, true) {
					fmt.Printf("   %s (delivery %s): committed; the ack is lost (simulated)\n", key, n)
					return nil, errors.New("ack lost")
				}
				fmt.Printf("   %s (delivery %s): processed, committed, acked\n", key, n)
			}
			return out, err
		}
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	// PoisonQueue outermost; MaxDeliveries inside the inbox, so that a redelivery whose
	// key is committed is skipped before its delivery count is looked at.
	router.AddMiddleware(poisonQueue, report, ib.Middleware, natskey.MaxDeliveries(5))
	router.AddConsumerHandler("payments", stream, sub, func(msg *message.Message) error {
		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
		if !ok {
			return errors.New("no inbox transaction in the context")
		}
		var account string
		var amount int
		if _, err := fmt.Sscan(string(msg.Payload), &account, &amount); err != nil {
			return err
		}
		if _, err := tx.Exec(msg.Context(), `INSERT INTO example_ledger VALUES ($1, $2, $3)`, firstOf(msg.UUID, msg.Metadata.Get(natskey.MetadataMsgID)), account, amount); err != nil {
			return err
		}
		fmt.Printf("   handler: credited %d to %s in the inbox transaction\n", amount, account)
		return nil
	})

	fmt.Println("5. router: consuming")
	runCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	for (processed.Load() < 2 || duplicates.Load() < 2) && runCtx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	if duplicates.Load() < 2 {
		return errors.New("the duplicates did not arrive within a minute")
	}

	for _, id := range []string{msgUUID, plainID} {
		var rows, total int
		if err := pool.QueryRow(context.Background(), `SELECT count(*), coalesce(sum(amount), 0) FROM example_ledger WHERE message_uuid = $1`, id).Scan(&rows, &total); err != nil {
			return err
		}
		if rows != 1 {
			return fmt.Errorf("ledger: %d rows for %s", rows, id)
		}
		fmt.Printf("6. ledger: %d row for %s, %d credited: applied once\n", rows, id, total)
	}
	return nil
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
