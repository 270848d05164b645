package v3_test

import (
	"context"
	stdsql "database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	sqlv3 "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	sqlv4 "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/outbox"
)

var logger = watermill.NopLogger{}

// world is one database with an inbox, a v3 outbox table and a v3 Forwarder moving its
// rows to an in-memory broker.
type world struct {
	d      sqltest.Database
	db     *stdsql.DB
	ib     *inbox.Inbox
	topic  string                  // the Forwarder's topic: the v3 outbox table
	broker *gochannel.GoChannel    // where the Forwarder publishes
	out    <-chan *message.Message // the forwarded "cashback" messages
}

func newWorld(t *testing.T, d sqltest.Database) *world {
	t.Helper()
	_, dsn := d.Isolated(t)
	w := &world{d: d, db: d.OpenDSN(t, dsn), topic: sqltest.Name("outbox")}
	w.ib = d.Inbox(t, w.db)

	// The v3 subscriber creates the outbox table and feeds the v3 Forwarder.
	sub, err := sqlv3.NewSubscriber(w.db, sqlv3.SubscriberConfig{
		ConsumerGroup:    "forwarder",
		SchemaAdapter:    w.v3Schema(),
		OffsetsAdapter:   w.v3Offsets(),
		InitializeSchema: true,
		PollInterval:     50 * time.Millisecond,
		ResendInterval:   50 * time.Millisecond,
		RetryInterval:    50 * time.Millisecond,
	}, logger)
	require.NoError(t, err)
	require.NoError(t, sub.SubscribeInitialize(w.topic))

	w.broker = gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, logger)
	t.Cleanup(func() { _ = w.broker.Close() })
	w.out, err = w.broker.Subscribe(context.Background(), "cashback")
	require.NoError(t, err)
	fwd, err := forwarder.NewForwarder(sub, w.broker, logger, forwarder.Config{ForwarderTopic: w.topic, CloseTimeout: 5 * time.Second})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- fwd.Run(context.Background()) }()
	select {
	case <-fwd.Running():
	case err := <-done:
		t.Fatalf("the Forwarder stopped: %v", err)
	}
	t.Cleanup(func() { _ = fwd.Close(); <-done })
	return w
}

func (w *world) v3Schema() sqlv3.SchemaAdapter {
	if w.d.Dialect == sqltest.MySQL {
		return sqlv3.DefaultMySQLSchema{}
	}
	return sqlv3.DefaultPostgreSQLSchema{}
}

func (w *world) v3Offsets() sqlv3.OffsetsAdapter {
	if w.d.Dialect == sqltest.MySQL {
		return sqlv3.DefaultMySQLOffsetsAdapter{}
	}
	return sqlv3.DefaultPostgreSQLOffsetsAdapter{}
}

// rows counts the outbox table's rows: the effect the inbox must apply once.
func (w *world) rows() (any, error) {
	var n int
	err := w.db.QueryRow("SELECT COUNT(*) FROM " + w.d.Quote("watermill_"+w.topic)).Scan(&n)
	return n, err
}

// event is the message the handler emits for msg: its id derives from the consumed key,
// so a rerun emits the same id.
func event(msg *message.Message) *message.Message {
	return message.NewMessage(outbox.MessageID("billing", msg.UUID, "CashbackCredited"), []byte(`{"cents":190}`))
}

// forwardedOnce waits for the forwarded message uuid, then checks that no other comes.
func (w *world) forwardedOnce(t *testing.T, uuid string) {
	t.Helper()
	select {
	case m := <-w.out:
		m.Ack()
		require.Equal(t, uuid, m.UUID, "the Forwarder keeps the emitted id")
	case <-time.After(20 * time.Second):
		t.Fatal("the emitted message was not forwarded")
	}
	select {
	case m := <-w.out:
		t.Fatalf("forwarded twice: %s", m.UUID)
	case <-time.After(500 * time.Millisecond):
	}
}

func TestWatermillSQLv3(t *testing.T) {
	t.Parallel()
	for _, d := range sqltest.Databases() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()

			t.Run("v3 publisher on the inbox *sql.Tx, v3 Forwarder", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, d)
				h := func(msg *message.Message) error {
					tx, ok := inbox.TxFromContext[*stdsql.Tx](msg.Context())
					if !ok {
						return fmt.Errorf("no inbox *sql.Tx")
					}
					pub, err := sqlv3.NewPublisher(tx, sqlv3.PublisherConfig{SchemaAdapter: w.v3Schema()}, logger)
					if err != nil {
						return err
					}
					return forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: w.topic}).Publish("cashback", event(msg))
				}
				msg := message.NewMessage("order-1", nil)
				require.NoError(t, inboxtest.CheckOnce(w.ib.Middleware, h, msg, w.rows))
				n, err := w.rows()
				require.NoError(t, err)
				require.Equal(t, 1, n, "one row: the rolled-back attempt's went with it, the duplicate wrote none")
				w.forwardedOnce(t, event(msg).UUID)
			})

			t.Run("v4 outbox into a v3 table, v3 Forwarder", func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, d)
				var schema sqlv4.SchemaAdapter = sqlv4.DefaultPostgreSQLSchema{}
				if d.Dialect == sqltest.MySQL {
					schema = sqlv4.DefaultMySQLSchema{}
				}
				ob, err := outbox.New(outbox.Config{ForwarderTopic: w.topic, SchemaAdapter: schema})
				require.NoError(t, err)
				h := func(msg *message.Message) error {
					return ob.Publish(msg.Context(), "cashback", event(msg))
				}
				msg := message.NewMessage("order-2", nil)
				require.NoError(t, inboxtest.CheckOnce(w.ib.Middleware, h, msg, w.rows))
				w.forwardedOnce(t, event(msg).UUID)
			})
		})
	}
}
