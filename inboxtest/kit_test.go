package inboxtest_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
)

// credit is a consumer handler (func(*message.Message) error) on the wallet.
func (w *wallet) credit(msg *message.Message) error {
	_, err := w.handler(msg)
	return err
}

func TestConsumerHandlerShapes(t *testing.T) {
	t.Parallel()
	w := newWallet(t)
	// Every function of the kit takes a consumer handler as it is...
	res := inboxtest.Deliver(w.ib.Middleware(inboxtest.HandlerFunc(w.credit)), message.NewMessage("shape-1", nil))
	require.NoError(t, res.Err)
	require.Empty(t, res.Produced, "a consumer handler produces nothing")
	failed := inboxtest.Deliver(w.ib.Middleware(inboxtest.FailAfter(1, w.credit)), message.NewMessage("shape-2", nil))
	require.ErrorIs(t, failed.Err, inboxtest.ErrInjected)
	// ...and named: message.NoPublishHandlerFunc, as Router.AddConsumerHandler takes it.
	named := message.NoPublishHandlerFunc(w.credit)
	_, again := inboxtest.CrashAfterCommit(w.ib.Middleware(inboxtest.HandlerFunc(named)), message.NewMessage("shape-1", nil))
	require.True(t, again.Duplicate)
	require.EqualValues(t, 190, w.cents(t), "shape-1 once; shape-2 rolled back")
	require.EqualValues(t, 2, w.calls.Load(), "the duplicate never reaches the handler")
}

func TestRouted(t *testing.T) {
	t.Parallel()
	w := newWalletFor(t, "") // the consumer comes from the handler name, as behind a Router
	h := w.ib.Middleware(w.handler)

	unnamed := inboxtest.Deliver(h, message.NewMessage("routed-1", nil))
	require.ErrorIs(t, unnamed.Err, inbox.ErrNoConsumer, "outside a Router the inbox has no consumer name")

	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "kept"))
	msg := message.NewMessage("routed-1", nil)
	msg.SetContext(ctx)
	inboxtest.Routed("billing", msg)
	require.Equal(t, "billing", message.HandlerNameFromCtx(msg.Context()))
	require.Equal(t, "kept", msg.Context().Value(ctxKey{}), "the message's own values stay")
	require.NoError(t, inboxtest.Deliver(h, msg).Err)
	require.True(t, inboxtest.Deliver(h, inboxtest.Routed("billing", message.NewMessage("routed-1", nil))).Duplicate)
	require.False(t, inboxtest.Deliver(h, inboxtest.Routed("receipts", message.NewMessage("routed-1", nil))).Duplicate,
		"another consumer processes the same message once more")

	stats, err := w.store.Stats(context.Background())
	require.NoError(t, err)
	consumers := map[string]int64{}
	for _, s := range stats {
		consumers[s.Consumer] = s.Keys
	}
	require.Equal(t, map[string]int64{"billing": 1, "receipts": 1}, consumers)

	cancel()
	require.ErrorIs(t, msg.Context().Err(), context.Canceled, "the message's own cancellation stays")
}

type ctxKey struct{}

func TestCheckOnce(t *testing.T) {
	t.Parallel()
	balance := func(w *wallet) func() (any, error) {
		return func() (any, error) { return w.cents(t), nil }
	}

	t.Run("the inbox transaction", func(t *testing.T) {
		t.Parallel()
		w := newWallet(t)
		require.NoError(t, inboxtest.CheckOnce(w.ib.Middleware, w.credit, message.NewMessage("once-1", nil), balance(w)))
		require.EqualValues(t, 190, w.cents(t))
	})

	t.Run("a transaction of its own escapes", func(t *testing.T) {
		t.Parallel()
		w := newWallet(t)
		// The trap: a transaction begun on the application's pool, not the inbox's.
		escaping := func(msg *message.Message) error {
			return pgx.BeginFunc(msg.Context(), w.pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(msg.Context(), `UPDATE `+w.table+` SET cents = cents + 190`)
				return err
			})
		}
		err := inboxtest.CheckOnce(w.ib.Middleware, escaping, message.NewMessage("once-2", nil), balance(w))
		require.ErrorIs(t, err, inboxtest.ErrEscaped)
		require.ErrorContains(t, err, "read 190 instead of 0")
	})

	t.Run("effects that see nothing prove nothing", func(t *testing.T) {
		t.Parallel()
		w := newWallet(t)
		err := inboxtest.CheckOnce(w.ib.Middleware, w.credit, message.NewMessage("once-3", nil),
			func() (any, error) { return "constant", nil })
		require.ErrorIs(t, err, inboxtest.ErrNotApplied)
	})
}
