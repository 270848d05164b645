package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// pgxSetup returns an inbox over a fresh pgx store and a ledger.
func pgxSetup(t *testing.T, cfg inbox.Config) (*inbox.Inbox, pgLedger) {
	t.Helper()
	t.Parallel()
	pool := pgPool(t)
	return newTestInbox(t, newPgxStore(t, pool, inbox.PostgresConfig{}), cfg), newPgLedger(t, pool)
}

// crediting is a handler that credits 190 through the inbox transaction and counts calls.
func crediting(l pgLedger, calls *atomic.Int32, produce ...*message.Message) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return produce, l.credit(msg.Context(), 190)
	}
}

func TestDuplicateModes(t *testing.T) {
	t.Parallel()
	out := message.NewMessage("cashback-1", []byte("1.90"))
	tests := []struct {
		name     string
		mode     inbox.DuplicateMode
		wantOut  int
		wantErr  error
		wantMark string
	}{
		{name: "replay returns the stored output", mode: inbox.Replay, wantOut: 1, wantMark: "true"},
		{name: "skip returns nothing", mode: inbox.Skip, wantOut: 0, wantMark: "true"},
		{name: "fail returns ErrDuplicate", mode: inbox.Fail, wantErr: inbox.ErrDuplicate, wantMark: "true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ib, l := pgxSetup(t, inbox.Config{OnDuplicate: tt.mode})
			var calls atomic.Int32
			h := ib.Middleware(crediting(l, &calls, out))

			first := message.NewMessage("order-1", []byte(`{}`))
			produced, err := h(first)
			require.NoError(t, err)
			require.Len(t, produced, 1)
			require.Empty(t, first.Metadata.Get(inbox.MetadataDuplicate))

			again := message.NewMessage("order-1", []byte(`{}`))
			produced, err = h(again)
			require.ErrorIs(t, err, tt.wantErr)
			require.Len(t, produced, tt.wantOut)
			require.Equal(t, tt.wantMark, again.Metadata.Get(inbox.MetadataDuplicate))
			require.EqualValues(t, 1, calls.Load())
			total, _ := l.balance(t)
			require.Equal(t, 190, total)
		})
	}
}

func TestReplayOfNothingReturnsNothing(t *testing.T) {
	ib, l := pgxSetup(t, inbox.Config{})
	var calls atomic.Int32
	h := ib.Middleware(crediting(l, &calls))
	for range 2 {
		produced, err := h(message.NewMessage("order-2", nil))
		require.NoError(t, err)
		require.Empty(t, produced)
	}
	require.EqualValues(t, 1, calls.Load())
}

func TestStaleMarksAreCleared(t *testing.T) {
	// watermill-kafka resends a copy of a nacked message with the metadata its failed
	// attempt got: a new message must not keep a duplicate mark.
	ib, l := pgxSetup(t, inbox.Config{})
	var calls atomic.Int32
	h := ib.Middleware(crediting(l, &calls))
	msg := message.NewMessage("order-3", nil)
	msg.Metadata.Set(inbox.MetadataDuplicate, "true")
	msg.Metadata.Set(inbox.MetadataMismatch, "true")
	_, err := h(msg)
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load())
	require.Empty(t, msg.Metadata.Get(inbox.MetadataDuplicate))
	require.Empty(t, msg.Metadata.Get(inbox.MetadataMismatch))
}

func TestNoKeyIsNeverProcessed(t *testing.T) {
	tests := []struct {
		name string
		key  inbox.KeyFunc
		msg  *message.Message
	}{
		{name: "empty uuid", key: inbox.KeyFromUUID, msg: message.NewMessage("", []byte("{}"))},
		{name: "key func returns empty", key: func(*message.Message) (string, error) { return "", nil }, msg: message.NewMessage("u-1", nil)},
		{name: "nil metadata", key: inbox.KeyFromMetadata("x-idempotency-key"), msg: &message.Message{UUID: "u-2"}},
		{name: "malformed json", key: inbox.KeyFromJSON("id"), msg: message.NewMessage("u-3", []byte("{"))},
	}
	_, l := pgxSetup(t, inbox.Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newPgxStore(t, pgPool(t), inbox.PostgresConfig{})
			ib := newTestInbox(t, store, inbox.Config{Key: tt.key})
			var calls atomic.Int32
			_, err := ib.Middleware(crediting(l, &calls))(tt.msg)
			require.ErrorIs(t, err, inbox.ErrNoKey)
			require.Contains(t, err.Error(), tt.msg.UUID)
			require.Zero(t, calls.Load(), "a message without a key must not be processed")
		})
	}
}

func TestConsumerDefaultsToHandlerName(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	store := newPgxStore(t, pool, inbox.PostgresConfig{})
	ib, err := inbox.New(inbox.Config{Store: store})
	require.NoError(t, err)

	var calls atomic.Int32
	_, err = ib.Middleware(crediting(newPgLedger(t, pool), &calls))(message.NewMessage("u-1", nil))
	require.ErrorIs(t, err, inbox.ErrNoConsumer, "outside a Router there is no handler name")
	require.Contains(t, err.Error(), "Config.Consumer")
	require.Zero(t, calls.Load())

	// Two handlers on one topic: each processes each message once.
	l := newPgLedger(t, pool)
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(ib.Middleware)
	var billing, notifications atomic.Int32
	router.AddConsumerHandler("billing", "orders", pubSub, func(msg *message.Message) error {
		_, err := crediting(l, &billing)(msg)
		return err
	})
	router.AddConsumerHandler("notifications", "orders", pubSub, func(msg *message.Message) error {
		_, err := crediting(l, &notifications)(msg)
		return err
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	for _, uuid := range []string{"order-1", "order-1", "order-2", "order-1"} {
		require.NoError(t, pubSub.Publish("orders", message.NewMessage(uuid, nil)))
	}
	require.Eventually(t, func() bool {
		_, credits := l.balance(t)
		return credits == 4 && billing.Load()+notifications.Load() == 4
	}, 10*time.Second, 20*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let any wrongly processed duplicate land
	_, credits := l.balance(t)
	require.Equal(t, 4, credits, "2 messages × 2 handlers")
	require.NoError(t, router.Close())
	stats, err := store.Stats(context.Background())
	require.NoError(t, err)
	require.Len(t, stats, 2)
	require.Equal(t, "billing", stats[0].Consumer)
	require.Equal(t, "notifications", stats[1].Consumer)
}

func TestHandlerPanicRollsBackAndPanics(t *testing.T) {
	ib, l := pgxSetup(t, inbox.Config{})
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		require.NoError(t, l.credit(msg.Context(), 190))
		panic("bug")
	})
	require.PanicsWithValue(t, "bug", func() { _, _ = h(message.NewMessage("order-4", nil)) })
	total, _ := l.balance(t)
	require.Zero(t, total)
}

func TestHandlerErrorIsReturnedUnchanged(t *testing.T) {
	ib, _ := pgxSetup(t, inbox.Config{})
	boom := errors.New("provider timed out")
	msg := message.NewMessage("order-5", nil)
	ctx := msg.Context()
	_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, boom })(msg)
	require.Equal(t, boom, err)
	require.Equal(t, ctx, msg.Context(), "the message context is restored")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	store := newPgxStore(t, pgPool(t), inbox.PostgresConfig{})
	tests := []struct {
		name    string
		cfg     inbox.Config
		wantErr string
	}{
		{name: "no store", cfg: inbox.Config{}, wantErr: "Store is nil"},
		{name: "long consumer", cfg: inbox.Config{Store: store, Consumer: strings.Repeat("c", 10_000)}, wantErr: "Consumer: consumer name is 10000 bytes"},
		{name: "bad mode", cfg: inbox.Config{Store: store, OnDuplicate: 7}, wantErr: "OnDuplicate is DuplicateMode(7)"},
		{name: "bad mismatch mode", cfg: inbox.Config{Store: store, OnMismatch: -1}, wantErr: "OnMismatch"},
		{name: "negative attempts", cfg: inbox.Config{Store: store, MaxAttempts: -1}, wantErr: "MaxAttempts is -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := inbox.New(tt.cfg)
			require.ErrorContains(t, err, "inbox: invalid config: ")
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestHostileTableNameIsRefused(t *testing.T) {
	t.Parallel()
	for _, table := range []string{"inbox; DROP TABLE x", `inbox"`, "1inbox", strings.Repeat("t", 64)} {
		_, err := inbox.NewPostgresStore(pgPool(t), inbox.PostgresConfig{Table: table})
		require.ErrorContains(t, err, "not a valid table name", table)
		_, err = inbox.PostgresSchema(table)
		require.Error(t, err)
	}
}

func TestProcessRejectsBadInput(t *testing.T) {
	ib, _ := pgxSetup(t, inbox.Config{})
	ctx := context.Background()
	_, err := ib.Process(ctx, "billing", "", func(context.Context) error { t.Fatal("called"); return nil })
	require.ErrorIs(t, err, inbox.ErrNoKey)
	_, err = ib.Process(ctx, "", "k", func(context.Context) error { t.Fatal("called"); return nil })
	require.ErrorIs(t, err, inbox.ErrNoConsumer)
	_, err = ib.Process(ctx, strings.Repeat("c", 10_000), "k", func(context.Context) error { t.Fatal("called"); return nil })
	require.ErrorContains(t, err, "10000 bytes")
}

// OrderPaid is a CQRS event for TestCQRSHandlerSeesTheTransaction.
type OrderPaid struct {
	OrderID string `json:"order_id"`
}

func TestCQRSHandlerSeesTheTransaction(t *testing.T) {
	ib, l := pgxSetup(t, inbox.Config{})
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	router.AddMiddleware(ib.Middleware)

	marshaler := cqrs.JSONMarshaler{}
	processor, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) { return p.EventName, nil },
		SubscriberConstructor: func(cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return pubSub, nil
		},
		Marshaler: marshaler,
	})
	require.NoError(t, err)
	var sawTx atomic.Bool
	require.NoError(t, processor.AddHandlers(cqrs.NewEventHandler("credit-cashback", func(ctx context.Context, e *OrderPaid) error {
		_, ok := inbox.TxFromContext[pgx.Tx](ctx)
		sawTx.Store(ok)
		return l.credit(ctx, 190)
	})))
	bus, err := cqrs.NewEventBusWithConfig(pubSub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) { return p.EventName, nil },
		Marshaler:            marshaler,
	})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	require.NoError(t, bus.Publish(ctx, &OrderPaid{OrderID: "o-1"}))
	require.Eventually(t, func() bool { total, _ := l.balance(t); return total == 190 }, 10*time.Second, 20*time.Millisecond)
	require.True(t, sawTx.Load(), "the CQRS handler's ctx carries the inbox transaction")
	require.NoError(t, router.Close())
}

func TestNilMetadataMessage(t *testing.T) {
	ib, l := pgxSetup(t, inbox.Config{})
	var calls atomic.Int32
	h := ib.Middleware(crediting(l, &calls))
	for range 2 {
		msg := &message.Message{UUID: "order-6"} // as the SQL subscriber yields for `null` metadata
		_, err := h(msg)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, calls.Load())
	total, _ := l.balance(t)
	require.Equal(t, 190, total)
}
