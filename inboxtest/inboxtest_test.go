package inboxtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
)

// wallet is a handler's world for these tests: an inbox on PostgreSQL and a wallet table
// it credits through the inbox transaction.
type wallet struct {
	pool  *pgxpool.Pool
	table string
	ib    *inbox.Inbox
	store *inbox.PostgresStore
	calls atomic.Int32
}

func newWallet(t *testing.T) *wallet { return newWalletFor(t, "billing") }

// newWalletFor is newWallet with an inbox whose Config.Consumer is consumer; "" leaves
// the consumer to the Router's handler name, as in production.
func newWalletFor(t *testing.T, consumer string) *wallet {
	t.Helper()
	dsn := os.Getenv("INBOX_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL is not reachable (set INBOX_POSTGRES_DSN): %v", err)
		}
		t.Skipf("PostgreSQL is not reachable (set INBOX_POSTGRES_DSN): %v", err)
	}
	t.Cleanup(pool.Close)
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	w := &wallet{pool: pool, table: "wallet_" + suffix}
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: "inboxtest_" + suffix})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(ctx))
	w.store = store
	_, err = pool.Exec(ctx, `CREATE TABLE `+w.table+` (cents bigint NOT NULL); INSERT INTO `+w.table+` VALUES (0)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(ctx, `DROP TABLE IF EXISTS `+w.table+`, inboxtest_`+suffix+`, inboxtest_`+suffix+`_attempts, inboxtest_`+suffix+`_offsets`)
	})
	w.ib, err = inbox.New(inbox.Config{Store: store, Consumer: consumer})
	require.NoError(t, err)
	return w
}

// handler credits 190 cents and produces a CashbackCredited message.
func (w *wallet) handler(msg *message.Message) ([]*message.Message, error) {
	w.calls.Add(1)
	tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
	if _, err := tx.Exec(msg.Context(), `UPDATE `+w.table+` SET cents = cents + 190`); err != nil {
		return nil, err
	}
	return []*message.Message{message.NewMessage("cashback-of-"+msg.UUID, []byte("190"))}, nil
}

func (w *wallet) cents(t *testing.T) int64 {
	var c int64
	require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT cents FROM `+w.table).Scan(&c))
	return c
}

func TestDeliverConcurrently(t *testing.T) {
	t.Parallel()
	w := newWallet(t)
	results := inboxtest.DeliverConcurrently(w.ib.Middleware(w.handler), message.NewMessage("order-1", nil), 8)
	duplicates := 0
	for _, r := range results {
		require.NoError(t, r.Err)
		require.Len(t, r.Produced, 1, "the first delivery's output, or its replay")
		require.Equal(t, "cashback-of-order-1", r.Produced[0].UUID)
		if r.Duplicate {
			duplicates++
		}
	}
	require.Equal(t, 7, duplicates)
	require.EqualValues(t, 1, w.calls.Load())
	require.EqualValues(t, 190, w.cents(t))
}

func TestFailAfter(t *testing.T) {
	t.Parallel()
	w := newWallet(t)
	h := w.ib.Middleware(inboxtest.FailAfter(1, w.handler))
	first := inboxtest.Deliver(h, message.NewMessage("order-2", nil))
	require.ErrorIs(t, first.Err, inboxtest.ErrInjected)
	require.Zero(t, w.cents(t), "the failed attempt's credit is rolled back")
	second := inboxtest.Deliver(h, message.NewMessage("order-2", nil))
	require.NoError(t, second.Err)
	require.False(t, second.Duplicate)
	require.EqualValues(t, 190, w.cents(t))
}

func TestCrashAfterCommit(t *testing.T) {
	t.Parallel()
	w := newWallet(t)
	first, again := inboxtest.CrashAfterCommit(w.ib.Middleware(w.handler), message.NewMessage("order-3", nil))
	require.NoError(t, first.Err)
	require.NoError(t, again.Err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.Produced[0].UUID, again.Produced[0].UUID, "the lost output is replayed")
	require.EqualValues(t, 190, w.cents(t))
}

// A publish that fails after the commit: the router nacks, the redelivery is a
// duplicate, and the replayed output is published — once, with its UUID.
func TestFailingPublisherOutputIsReplayed(t *testing.T) {
	t.Parallel()
	w := newWallet(t)
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, logger)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	router.AddMiddleware(w.ib.Middleware)
	failing := &inboxtest.FailingPublisher{Next: pubSub, Failures: 1}
	router.AddHandler("billing", "orders", pubSub, "cashback", failing, w.handler)

	cashback, err := pubSub.Subscribe(context.Background(), "cashback")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	require.NoError(t, pubSub.Publish("orders", message.NewMessage("order-4", nil)))

	select {
	case out := <-cashback:
		out.Ack()
		require.Equal(t, "cashback-of-order-4", out.UUID)
	case <-time.After(10 * time.Second):
		t.Fatal("the produced message was lost")
	}
	select {
	case out := <-cashback:
		t.Fatalf("published twice: %s", out.UUID)
	case <-time.After(200 * time.Millisecond):
	}
	require.EqualValues(t, 1, w.calls.Load())
	require.EqualValues(t, 190, w.cents(t))
	require.NoError(t, router.Close())
}
