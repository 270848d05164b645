package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/outbox"
)

// The minimal Forwarder of the README and docs/outbox.md, as written there (fresh table
// names aside): the outbox table created without a subscriber, a Forwarder from it to a
// broker (GoChannel here), and a handler that emits through the outbox with an id derived
// from its claim. The event reaches the broker with that id.
func TestForwarderSnippet(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	ib, _ := newInbox(t, pool, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := watermill.NopLogger{}
	broker := gochannel.NewGoChannel(gochannel.Config{}, logger) // your Kafka or RabbitMQ publisher
	t.Cleanup(func() { _ = broker.Close() })
	cashback, err := broker.Subscribe(ctx, "cashback")
	require.NoError(t, err)
	forwarderTopic := sqltest.Name("outbox")
	dropLater(t, pool, "watermill_"+forwarderTopic, "watermill_offsets_"+forwarderTopic)

	// --- the snippet ---
	ob, err := outbox.New(outbox.Config{ForwarderTopic: forwarderTopic})
	require.NoError(t, err)
	err = ob.InitializeSchema(ctx, sql.BeginnerFromPgx(pool)) // the outbox table, before any handler runs
	require.NoError(t, err)

	sub, err := sql.NewSubscriber(sql.BeginnerFromPgx(pool), sql.SubscriberConfig{
		ConsumerGroup:    "forwarder",
		SchemaAdapter:    ob.Config().SchemaAdapter,
		OffsetsAdapter:   sql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true, // its offsets table
	}, logger)
	require.NoError(t, err)
	fwd, err := forwarder.NewForwarder(sub, broker, logger, forwarder.Config{ForwarderTopic: ob.Config().ForwarderTopic})
	require.NoError(t, err)
	go func() { _ = fwd.Run(ctx) }()

	billing := func(msg *message.Message) error { // behind ib.Middleware
		id, err := outbox.MessageIDFromContext(msg.Context(), "CashbackCredited")
		if err != nil {
			return err
		}
		return ob.Publish(msg.Context(), "cashback", message.NewMessage(id, []byte(`{"cents":190}`)))
	}
	// --- end of the snippet ---
	t.Cleanup(func() { _ = fwd.Close() })

	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) { return nil, billing(msg) })
	order := inboxtest.Routed("billing", message.NewMessage(watermill.NewUUID(), []byte(`{"order":"order-1"}`)))
	_, err = h(order)
	require.NoError(t, err)
	select {
	case got := <-cashback:
		got.Ack()
		require.Equal(t, outbox.MessageID("billing", order.UUID, "CashbackCredited"), got.UUID)
		require.JSONEq(t, `{"cents":190}`, string(got.Payload))
	case <-time.After(30 * time.Second):
		t.Fatal("the Forwarder did not deliver the event within 30 s")
	}
	_, ok := inbox.ClaimFromContext(order.Context())
	require.False(t, ok)
}
