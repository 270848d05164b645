package inbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
)

// A handler renamed under the default consumer name (the Watermill handler name) meets
// a table that holds the old name's keys: the inbox says so once, at its first message,
// naming the old consumer; a consumer with keys of its own, a table with no other
// consumer's keys, and every later message say nothing. On every store flavour that can
// tell cheaply; the others declare that they cannot.
func TestNewConsumerNameOnATableOfOthersIsLoggedOnce(t *testing.T) {
	t.Parallel()
	for _, f := range storeFlavours() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			ctx := f.context()
			fx := f.open(t, storeOpts{})
			nb, ok := fx.store.(inbox.ConsumerNeighbours)
			if f.caps.noNeighbours {
				if ok { // a router (TenantStore) whose tenants' stores cannot tell: it refuses
					_, err := nb.NeighbourConsumers(ctx, "billing")
					require.ErrorIs(t, err, errors.ErrUnsupported)
				}
				t.Skip("the store cannot tell cheaply whether a consumer name is new (caps.noNeighbours)")
			}
			require.True(t, ok, "the store implements ConsumerNeighbours unless its flavour declares it cannot")
			logs := newCapturingLogger()
			ib, err := inbox.New(inbox.Config{Store: fx.store, Logger: logs})
			require.NoError(t, err)
			h := ib.Middleware(func(m *message.Message) ([]*message.Message, error) { return nil, fx.ledger.credit(m.Context(), 1) })
			deliver := func(handler, id string) {
				t.Helper()
				_, err := h(inboxtest.Routed(handler, f.message(id, nil)))
				require.NoError(t, err)
			}
			warnings := func() (n int, text string) {
				for _, l := range logs.all() {
					if strings.Contains(l.msg, "has no keys in the inbox table") {
						n++
						text = l.String()
					}
				}
				return n, text
			}

			deliver("billing", "order-1") // an empty table: nothing to say
			deliver("billing", "order-2")
			n, _ := warnings()
			require.Zero(t, n)

			deliver("billing-v2", "order-1") // renamed: the old name's keys are there
			n, text := warnings()
			require.Equal(t, 1, n)
			require.Contains(t, text, `"billing-v2"`)
			require.Contains(t, text, `"billing"`, "names the consumer next to it")
			require.Contains(t, text, "inbox.Config.Consumer")
			deliver("billing-v2", "order-3")
			deliver("billing-v2", "order-4")
			n, _ = warnings()
			require.Equal(t, 1, n, "once per consumer name")

			// A new Inbox (a restart) on a table where the name has keys: nothing.
			logs2 := newCapturingLogger()
			ib2, err := inbox.New(inbox.Config{Store: fx.store, Logger: logs2})
			require.NoError(t, err)
			_, err = ib2.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(
				inboxtest.Routed("billing-v2", f.message("order-5", nil)))
			require.NoError(t, err)
			for _, l := range logs2.all() {
				require.NotContains(t, l.msg, "has no keys in the inbox table")
			}

			// The ability itself: nil for a consumer with keys, the names around a new one.
			n2 := fx.store.(inbox.ConsumerNeighbours)
			others, err := n2.NeighbourConsumers(ctx, "billing")
			require.NoError(t, err)
			require.Empty(t, others)
			others, err = n2.NeighbourConsumers(ctx, "billing-v1")
			require.NoError(t, err)
			require.Equal(t, []string{"billing", "billing-v2"}, others)
			others, err = n2.NeighbourConsumers(ctx, "a")
			require.NoError(t, err)
			require.Equal(t, []string{"billing"}, others)
		})
	}
}
