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
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/exampleenv"
	"github.com/watermill-inbox/inbox/natskey"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()
	url := exampleenv.NATSURL()
	ledger, err := exampleenv.OpenLedger(ctx)
	if err != nil {
		return err
	}
	defer ledger.Close()
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
	return consume(js, ledger, url, stream, durable, msgUUID, plainID)
}

func consume(js nats.JetStreamContext, ledger *exampleenv.Ledger, url, stream, durable, msgUUID, plainID string) error {
	ib, err := inbox.New(inbox.Config{
		Store: ledger.Store,
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
			key := cmp.Or(msg.UUID, msg.Metadata.Get(natskey.MetadataMsgID))
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
		account, amount, err := exampleenv.Credit(msg.Context(), tx, cmp.Or(msg.UUID, msg.Metadata.Get(natskey.MetadataMsgID)), msg.Payload)
		if err != nil {
			return err
		}
		fmt.Printf("   handler: credited %d to %s in the inbox transaction\n", amount, account)
		return nil
	})

	fmt.Println("5. router: consuming")
	if err := exampleenv.RunUntil(context.Background(), router, "the duplicates did not arrive", func() bool {
		return processed.Load() >= 2 && duplicates.Load() >= 2
	}); err != nil {
		return err
	}

	return ledger.CheckAppliedOnce(context.Background(), 6, msgUUID, plainID)
}
