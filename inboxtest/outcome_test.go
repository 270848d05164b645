package inboxtest_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
)

func TestDeliver_ReportsTheOutcome(t *testing.T) {
	t.Parallel()
	w := newWallet(t)
	h := w.ib.Middleware(w.handler)
	msg := message.NewMessage("order-1", []byte("{}"))

	first := inboxtest.Deliver(h, msg)
	require.NoError(t, first.Err)
	require.Equal(t, inbox.OutcomeProcessed, first.Outcome)

	again := inboxtest.Deliver(h, msg)
	require.NoError(t, again.Err)
	require.True(t, again.Duplicate)
	require.Equal(t, inbox.OutcomeReplayed, again.Outcome, "the first delivery produced a message, replayed")

	other := message.NewMessage("order-1", []byte(`{"amount":1}`))
	mismatch := inboxtest.Deliver(h, other)
	require.Equal(t, inbox.OutcomeMismatch, mismatch.Outcome)
	require.Equal(t, int64(190), w.cents(t))
}
