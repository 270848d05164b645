// Command redisstream shows the inbox with Redis Streams: a Watermill Router consumes a
// stream in a consumer group, the handler writes a PostgreSQL ledger through the
// transaction the inbox put in the message context, and a second delivery of the same
// message is skipped, for a Watermill message (keyed by its UUID) and for a plain entry
// another producer added with XADD (keyed by its event_id field, which
// rediskey.Unmarshaller makes metadata). A consumer that committed an entry and died
// before its XACK leaves it pending; another consumer claims it after MaxIdleTime and
// skips it.
//
//	go run ./_examples/redisstream
//
// Redis comes from INBOX_REDIS_URL (default redis://127.0.0.1:6379/0), PostgreSQL from
// INBOX_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test).
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
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/exampleenv"
	"github.com/watermill-inbox/inbox/rediskey"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	opts, err := redis.ParseURL(exampleenv.RedisURL())
	if err != nil {
		return err
	}
	ledger, err := exampleenv.OpenLedger(ctx)
	if err != nil {
		return err
	}
	defer ledger.Close()
	fmt.Println("1. postgres: tables inbox_example and example_ledger ready")

	rdb := redis.NewClient(opts)
	defer rdb.Close()
	stream, group := fmt.Sprintf("payments-%d", time.Now().UnixNano()), "payments"
	defer rdb.Del(ctx, stream)
	if err := rdb.XGroupCreateMkStream(ctx, stream, group, "0").Err(); err != nil {
		return err
	}

	// The same Watermill message twice, and a plain entry twice (a producer retry).
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	msgUUID := watermill.NewUUID()
	for range 2 {
		if err := pub.Publish(stream, message.NewMessage(msgUUID, []byte("alice 42"))); err != nil {
			return err
		}
	}
	eventID := fmt.Sprintf("order-7-paid-%d", time.Now().UnixNano()) // new each run: the inbox table outlives it
	for range 2 {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"event_id": eventID, "payload": "bob 7"}}).Err(); err != nil {
			return err
		}
	}
	fmt.Printf("2. redis: stream %s: Watermill message %s twice, plain entry %s twice\n", stream, msgUUID, eventID)

	ib, err := inbox.New(inbox.Config{
		Store: ledger.Store,
		// Watermill messages carry a UUID; this producer puts an id in the event_id field.
		Key: inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromMetadata("event_id")),
		// Both Redis consumers below are one inbox consumer (by default, the handler name).
		Consumer: "payments",
	})
	if err != nil {
		return err
	}
	subscriber := func(consumer string) (message.Subscriber, error) {
		return redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client:          redis.NewClient(opts),
			Unmarshaller:    rediskey.Unmarshaller{}, // the default one stops reading at a plain entry
			ConsumerGroup:   group,
			Consumer:        consumer,
			NackResendSleep: 100 * time.Millisecond, // the default resends a nacked message at once, in a loop
			MaxIdleTime:     2 * time.Second,        // claim a dead consumer's pending entries after 2 s (default 60 s)
			ClaimInterval:   500 * time.Millisecond,
		}, watermill.NopLogger{})
	}

	var processed, duplicates atomic.Int32
	var stopping atomic.Bool
	report := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			key := cmp.Or(msg.UUID, msg.Metadata.Get("event_id"))
			consumer := message.HandlerNameFromCtx(msg.Context())
			switch {
			case stopping.Load():
			case err != nil:
				fmt.Printf("   %s: %s failed: %v\n", consumer, key, err)
			case msg.Metadata.Get(inbox.MetadataDuplicate) == "true":
				duplicates.Add(1)
				fmt.Printf("   %s: %s duplicate, skipped: the handler was not called\n", consumer, key)
			default:
				processed.Add(1)
				fmt.Printf("   %s: %s processed, committed\n", consumer, key)
			}
			return out, err
		}
	}
	handler := func(msg *message.Message) error {
		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
		if !ok {
			return errors.New("no inbox transaction in the context")
		}
		_, _, err := exampleenv.Credit(msg.Context(), tx, cmp.Or(msg.UUID, msg.Metadata.Get("event_id")), msg.Payload)
		return err
	}

	// Consumer "first" handles the first entry and then hangs before its XACK, as a
	// process that died after its commit would: the entry stays pending.
	hang := make(chan struct{})
	defer close(hang)
	var hung atomic.Bool
	first, err := subscriber("first")
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r1, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	r1.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if hung.CompareAndSwap(false, true) {
				fmt.Println("   first: dies after the commit, before the XACK (simulated: it hangs)")
				<-hang
			}
			return out, err
		}
	}, report, ib.Middleware)
	r1.AddConsumerHandler("first", stream, first, handler)
	go func() { _ = r1.Run(runCtx) }()
	fmt.Println("3. consumer first: consuming")
	for !hung.Load() && runCtx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}

	fmt.Println("4. consumer second: consuming; claims first's pending entry after MaxIdleTime")
	second, err := subscriber("second")
	if err != nil {
		return err
	}
	r2, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	r2.AddMiddleware(report, ib.Middleware)
	r2.AddConsumerHandler("second", stream, second, handler)
	// Two new entries processed; three duplicates: the second copies, and the claimed entry.
	if err := exampleenv.RunUntil(runCtx, r2, "the duplicates did not arrive", func() bool {
		if processed.Load() < 2 || duplicates.Load() < 3 {
			return false
		}
		stopping.Store(true) // what fails as the routers stop is not reported
		return true
	}); err != nil {
		return err
	}

	return ledger.CheckAppliedOnce(ctx, 5, msgUUID, eventID)
}
