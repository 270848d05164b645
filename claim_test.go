package inbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The handler finds the claim (consumer, key as stored, tenant) in its context, behind
// every entry point, on every store flavour and in a joined transaction; a key longer
// than MaxKeyLen is given as stored (its SHA-256), whatever KeyFunc found it.
func TestClaimInTheHandlersContext(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", inbox.MaxKeyLen+1)
	for _, f := range storeFlavours() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			ctx := f.context() // the tenant flavours' tenant
			fx := f.open(t, storeOpts{})
			maxAttempts := 3 // the claim carries no attempt token
			if f.caps.attemptsRefused {
				maxAttempts = 0 // refused behind a transaction pooler (ADR 96)
			}
			ib := newTestInbox(t, fx.store, inbox.Config{
				Consumer:    "billing",
				Key:         inbox.FirstOf(inbox.KeyFromMetadata("event_id"), inbox.KeyFromUUID),
				MaxAttempts: maxAttempts,
			})
			var got []inbox.Record
			seen := func(ctx context.Context) {
				rec, ok := inbox.ClaimFromContext(ctx)
				require.True(t, ok, "the handler's context carries the claim")
				got = append(got, rec)
			}

			// The middleware, the key from metadata (not the UUID), too long to store as it is.
			msg := f.message("uuid-1", []byte(`{}`))
			msg.Metadata.Set("event_id", long)
			_, err := ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
				seen(m.Context())
				return nil, fx.ledger.credit(m.Context(), 1)
			})(msg)
			require.NoError(t, err)
			_, ok := inbox.ClaimFromContext(msg.Context())
			require.False(t, ok, "the message's own context is given back without the claim")

			_, err = ib.Process(ctx, "receipts", "order-1", func(ctx context.Context) error { seen(ctx); return nil })
			require.NoError(t, err)
			_, err = ib.ProcessResult(ctx, "webhooks", "evt-1", nil, func(ctx context.Context) ([]byte, error) {
				seen(ctx)
				return []byte("ok"), nil
			})
			require.NoError(t, err)
			_, _, err = inbox.ProcessJSON(ctx, ib, "api", "req-1", nil, func(ctx context.Context) (int, error) { seen(ctx); return 1, nil })
			require.NoError(t, err)

			want := []inbox.Record{
				{Consumer: "billing", Key: inbox.StorableKey(long)},
				{Consumer: "receipts", Key: "order-1"},
				{Consumer: "webhooks", Key: "evt-1"},
				{Consumer: "api", Key: "req-1"},
			}
			if !f.caps.noJoin { // a transaction of the caller's, joined
				tx, end := fx.begin(t)
				plain := newTestInbox(t, fx.store, inbox.Config{}) // MaxAttempts needs a second connection beside a joined transaction
				_, err = plain.Process(inbox.ContextWithTx(ctx, tx), "joined", "order-2", func(ctx context.Context) error { seen(ctx); return nil })
				require.NoError(t, err)
				require.NoError(t, end(true))
				want = append(want, inbox.Record{Consumer: "joined", Key: "order-2"})
			}
			for i := range got {
				got[i].Fingerprint = nil // the default fingerprint, not what this test is about
			}
			for i := range want {
				want[i].Tenant = f.tenant // the tenant flavours' claims name it; the others' none
			}
			require.Equal(t, want, got)
			// The claim names what is stored: Forget finds the long key by its original form.
			forgotten, err := fx.store.Forget(ctx, "billing", long)
			require.NoError(t, err)
			require.True(t, forgotten)

			// A duplicate does not reach the handler; outside the inbox there is no claim.
			dup, err := ib.Process(ctx, "receipts", "order-1", func(ctx context.Context) error { seen(ctx); return nil })
			require.NoError(t, err)
			require.True(t, dup)
			require.Len(t, got, len(want))
			_, ok = inbox.ClaimFromContext(ctx)
			require.False(t, ok)
			_, ok = inbox.ClaimFromContext(inbox.ContextWithTx(ctx, "a transaction of the test's own"))
			require.False(t, ok, "ContextWithTx alone carries no claim")
		})
	}
}
