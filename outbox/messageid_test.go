package outbox_test

import (
	"context"
	stdsql "database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/outbox"
)

// MessageIDFromContext derives the id from the claim in the handler's context: the
// consumer and the key as stored, whatever KeyFunc found it. Outside a handler it fails
// with ErrNoTx, which is inbox.ErrNoTx.
func TestMessageIDFromContext(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	ctx := context.Background()
	table := sqltest.Name("inbox")
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(ctx))
	dropLater(t, pool, table, table+"_attempts")
	ib, err := inbox.New(inbox.Config{Store: store, Key: inbox.FirstOf(inbox.KeyFromMetadata("event_id"), inbox.KeyFromUUID)})
	require.NoError(t, err)

	// Behind the middleware under a Router's handler name, the key from metadata: the id
	// is MessageID(handler name, the key), not anything built from msg.UUID.
	var ids []string
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		id, err := outbox.MessageIDFromContext(msg.Context(), "CashbackCredited")
		ids = append(ids, id)
		return nil, err
	})
	for range 2 { // the second run after a Forget, as a rerun after a rollback: the same id
		msg := inboxtest.Routed("billing", message.NewMessage("uuid-1", nil))
		msg.Metadata.Set("event_id", "order-7")
		_, err := h(msg)
		require.NoError(t, err)
		_, err = store.Forget(ctx, "billing", "order-7")
		require.NoError(t, err)
	}
	want := outbox.MessageID("billing", "order-7", "CashbackCredited")
	require.Equal(t, []string{want, want}, ids)

	// Process: the consumer and key given to it; a key too long is used as stored.
	long := strings.Repeat("k", inbox.MaxKeyLen+1)
	_, err = ib.Process(ctx, "receipts", long, func(ctx context.Context) error {
		id, err := outbox.MessageIDFromContext(ctx, "0")
		require.NoError(t, err)
		require.Equal(t, outbox.MessageID("receipts", inbox.StorableKey(long), "0"), id)
		return nil
	})
	require.NoError(t, err)

	for _, ctx := range []context.Context{ctx, inbox.ContextWithTx(ctx, &stdsql.Tx{})} {
		_, err := outbox.MessageIDFromContext(ctx, "CashbackCredited")
		require.ErrorIs(t, err, outbox.ErrNoTx)
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.Equal(t, 1, strings.Count(err.Error(), "outbox:"), "%q", err)
		require.NotContains(t, err.Error(), "\n")
	}
}

// The outbox's refusals are inbox.ErrNoTx, and say "outbox:" once, on one line.
func TestErrNoTxIsTheInboxOne(t *testing.T) {
	t.Parallel()
	ob, err := outbox.New(outbox.Config{})
	require.NoError(t, err)
	for _, ctx := range []context.Context{context.Background(), inbox.ContextWithTx(context.Background(), pgx.Tx(nil))} {
		err := ob.Publish(ctx, "cashback", message.NewMessage("1", nil))
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.Equal(t, 1, strings.Count(err.Error(), "outbox:"), "%q", err)
		require.NotContains(t, err.Error(), "\n")
	}
}

// Ids of messages without a tenant are those of every earlier version (the value below
// was printed by the version before TenantMessageID): a service upgrading emits the same
// ids for the same messages. A tenant's ids differ from them and from one another.
func TestMessageIDsWithoutATenantAreUnchanged(t *testing.T) {
	t.Parallel()
	const before = "8ca17389-e0b1-54c0-bb2f-65ed33556aa0"
	require.Equal(t, before, outbox.MessageID("billing", "order-1", "CashbackCredited"))
	require.Equal(t, before, outbox.TenantMessageID("", "billing", "order-1", "CashbackCredited"))
	ids := map[string]string{}
	for _, args := range [][4]string{
		{"", "billing", "order-1", "CashbackCredited"},
		{"acme", "billing", "order-1", "CashbackCredited"},
		{"globex", "billing", "order-1", "CashbackCredited"},
		{"acmeb", "illing", "order-1", "CashbackCredited"}, // the lengths keep the strings apart
	} {
		id := outbox.TenantMessageID(args[0], args[1], args[2], args[3])
		require.NotContains(t, ids, id, "%q gives %q's id", args, ids[id])
		ids[id] = fmt.Sprint(args)
	}
}
