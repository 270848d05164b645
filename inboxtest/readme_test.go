package inboxtest_test

import (
	"os"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
)

// setUpCashback returns an inbox configured as in production (no Config.Consumer: the
// Router names the consumer), a consumer handler crediting 190 cents through the inbox
// transaction, and the wallet's balance.
func setUpCashback(t *testing.T) (*inbox.Inbox, func(*message.Message) error, func() int64) {
	w := newWalletFor(t, "")
	credit := func(msg *message.Message) error {
		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
		if !ok {
			return inbox.ErrTxDone // not behind the inbox: refuse rather than write outside it
		}
		_, err := tx.Exec(msg.Context(), `UPDATE `+w.table+` SET cents = cents + 190`)
		return err
	}
	return w.ib, credit, func() int64 { return w.cents(t) }
}

// The README's "Testing your handlers" section quotes this test verbatim
// (TestREADMEQuotesTheKitExample checks that it does).
func TestCashbackIsCreditedOnce(t *testing.T) {
	t.Parallel()
	ib, credit, balance := setUpCashback(t) // an inbox on a test database, a consumer handler
	h := ib.Middleware(inboxtest.HandlerFunc(credit))

	// The same message to 8 consumers at once: one processes it, 7 are duplicates.
	// Routed gives it the handler name a Router would: the inbox files the key under it.
	order1 := inboxtest.Routed("billing", message.NewMessage("order-1", []byte(`{"cents":190}`)))
	duplicates := 0
	for _, r := range inboxtest.DeliverConcurrently(h, order1, 8) {
		require.NoError(t, r.Err)
		if r.Duplicate {
			duplicates++
		}
	}
	require.Equal(t, 7, duplicates)
	require.EqualValues(t, 190, balance())

	// A failure after the handler wrote: rolled back, the next delivery processes it.
	order2 := inboxtest.Routed("billing", message.NewMessage("order-2", []byte(`{"cents":190}`)))
	failed := inboxtest.Deliver(ib.Middleware(inboxtest.FailAfter(1, credit)), order2)
	require.ErrorIs(t, failed.Err, inboxtest.ErrInjected)
	require.EqualValues(t, 190, balance())
	require.NoError(t, inboxtest.Deliver(h, order2).Err)
	require.EqualValues(t, 380, balance())

	// A crash after the commit, before the ack: the redelivery is a duplicate.
	first, again := inboxtest.CrashAfterCommit(h, inboxtest.Routed("billing", message.NewMessage("order-3", nil)))
	require.NoError(t, first.Err)
	require.True(t, again.Duplicate)
	require.EqualValues(t, 570, balance())

	// Writes that escape the inbox transaction (a transaction begun on the app's own
	// handle) survive a rolled-back delivery: CheckOnce returns inboxtest.ErrEscaped.
	order4 := inboxtest.Routed("billing", message.NewMessage("order-4", nil))
	require.NoError(t, inboxtest.CheckOnce(ib.Middleware, credit, order4,
		func() (any, error) { return balance(), nil }))
}

// The README quotes TestCashbackIsCreditedOnce as it is here.
func TestREADMEQuotesTheKitExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("readme_test.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	start := strings.Index(string(src), "func TestCashbackIsCreditedOnce(")
	end := strings.Index(string(src[start:]), "\n}\n")
	require.True(t, start >= 0 && end > 0)
	quoted := string(src[start : start+end+2])
	require.True(t, strings.Contains(string(readme), quoted), "paste TestCashbackIsCreditedOnce from inboxtest/readme_test.go into the README's Testing your handlers section")
}
