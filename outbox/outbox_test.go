package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/outbox"
)

var uuidV5 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestMessageID(t *testing.T) {
	t.Parallel()
	base := outbox.MessageID("billing", "order-1", "CashbackCredited")
	tests := []struct {
		name               string
		consumer, key, pos string
		wantSameAsBase     bool
	}{
		{name: "same inputs give the same id", consumer: "billing", key: "order-1", pos: "CashbackCredited", wantSameAsBase: true},
		{name: "another position", consumer: "billing", key: "order-1", pos: "0"},
		{name: "another consumed key", consumer: "billing", key: "order-2", pos: "CashbackCredited"},
		{name: "another consumer", consumer: "shipping", key: "order-1", pos: "CashbackCredited"},
		{name: "boundary moved between consumer and key", consumer: "billingo", key: "rder-1", pos: "CashbackCredited"},
		{name: "boundary moved between key and position", consumer: "billing", key: "order-1C", pos: "ashbackCredited"},
		{name: "empty strings", consumer: "", key: "", pos: ""},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := outbox.MessageID(tt.consumer, tt.key, tt.pos)
			require.Regexp(t, uuidV5, got, "a version 5 UUID in text form")
			require.Equal(t, got, outbox.MessageID(tt.consumer, tt.key, tt.pos), "deterministic")
			if tt.wantSameAsBase {
				require.Equal(t, base, got)
				return
			}
			require.NotEqual(t, base, got)
			require.NotContains(t, seen, got, "collides with %q", seen[got])
			seen[got] = tt.name
		})
	}
}

func TestMessageIDDistinctPerPosition(t *testing.T) {
	t.Parallel()
	seen := map[string]int{}
	for i := range 1000 {
		id := outbox.MessageID("billing", "order-1", fmt.Sprint(i))
		require.NotContains(t, seen, id)
		seen[id] = i
	}
}

func TestNewRejectsInvalidTopic(t *testing.T) {
	t.Parallel()
	_, err := outbox.New(outbox.Config{ForwarderTopic: `outbox"; DROP TABLE x; --`})
	require.ErrorContains(t, err, "ForwarderTopic")
}

func TestPublisherNeedsTheInboxTransaction(t *testing.T) {
	t.Parallel()
	ob, err := outbox.New(outbox.Config{})
	require.NoError(t, err)
	tests := []struct {
		name string
		ctx  context.Context
	}{
		{name: "no transaction", ctx: context.Background()},
		{name: "a transaction of another type", ctx: inbox.ContextWithTx(context.Background(), "not a tx")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ob.Publisher(tt.ctx)
			require.ErrorIs(t, err, outbox.ErrNoTx)
			require.ErrorIs(t, ob.Publish(tt.ctx, "topic", message.NewMessage("1", nil)), outbox.ErrNoTx)
		})
	}
}

// emit publishes n events for topic, emitted by "billing" for the consumed key, through
// the outbox with deterministic ids, and returns their UUIDs.
func emit(ctx context.Context, ob *outbox.Outbox, topic, key string, n int) ([]string, error) {
	var ids []string
	var msgs []*message.Message
	for i := range n {
		id := outbox.MessageID("billing", key, fmt.Sprint(i))
		ids = append(ids, id)
		msgs = append(msgs, message.NewMessage(id, []byte(fmt.Sprintf(`{"order":%q,"n":%d}`, key, i))))
	}
	return ids, ob.Publish(ctx, topic, msgs...)
}

func TestOutboxCommitsAndRollsBackWithTheInboxKey(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	ib, _ := newInbox(t, pool, "billing")
	ob := newOutbox(t, pool)
	ctx := context.Background()
	errProvider := errors.New("cashback provider timed out")

	// First delivery: the handler emits, then fails: its outbox rows go with its key.
	var first []string
	dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
		var err error
		if first, err = emit(ctx, ob, "cashback", "order-1", 2); err != nil {
			return err
		}
		return errProvider
	})
	require.ErrorIs(t, err, errProvider)
	require.False(t, dup)
	require.Empty(t, outboxRows(t, pool, ob), "the failed handler's outbox rows rolled back")

	// Redelivery: the handler runs again and emits the same ids; they commit.
	var second []string
	dup, err = ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
		var err error
		second, err = emit(ctx, ob, "cashback", "order-1", 2)
		return err
	})
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, first, second, "the rerun emits the same ids")
	require.Equal(t, second, outboxRows(t, pool, ob), "exactly the committed handler's rows")

	// A further redelivery is a duplicate: nothing more is written.
	dup, err = ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
		_, err := emit(ctx, ob, "cashback", "order-1", 2)
		return err
	})
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, second, outboxRows(t, pool, ob))
}

func TestOutboxOnDatabaseSQLTransaction(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	ob := newOutbox(t, pool)
	db, err := sql.Open("pgx", postgresDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	tests := []struct {
		name     string
		key      string
		end      func(*sql.Tx) error
		wantRows int
	}{
		{name: "rolled back", key: "order-rolled-back", end: (*sql.Tx).Rollback, wantRows: 0},
		{name: "committed", key: "order-committed", end: (*sql.Tx).Commit, wantRows: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := db.BeginTx(context.Background(), nil)
			require.NoError(t, err)
			ids, err := emit(inbox.ContextWithTx(context.Background(), tx), ob, "cashback", tt.key, 1)
			require.NoError(t, err)
			require.NoError(t, tt.end(tx))
			var n int
			require.NoError(t, pool.QueryRow(context.Background(),
				`SELECT count(*) FROM `+pgx.Identifier{"watermill_" + ob.Config().ForwarderTopic}.Sanitize()+` WHERE payload->>'uuid' = $1`, ids[0]).Scan(&n))
			require.Equal(t, tt.wantRows, n)
		})
	}
}

func TestForwarderKeepsUUIDsAndDownstreamInboxDedupsAReforward(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	queue, amqpPub, amqpSub := amqpQueue(t)
	ib, _ := newInbox(t, pool, "billing")
	ob := newOutbox(t, pool)
	r := newReceipts(t, pool)
	outcomes := runNotifications(t, pool, amqpSub, queue, r)

	var ids []string
	_, err := ib.Process(context.Background(), "billing", "order-1", func(ctx context.Context) error {
		var err error
		ids, err = emit(ctx, ob, queue, "order-1", 2)
		return err
	})
	require.NoError(t, err)

	runForwarder(t, pool, ob, "forwarder", amqpPub)
	for range ids {
		o := next(t, outcomes)
		require.NoError(t, o.err)
		require.False(t, o.duplicate)
	}
	require.ElementsMatch(t, ids, r.uuids(t), "forwarded with the UUIDs they were published with")

	// A second forwarder (another consumer group, as after a forwarder crash before its
	// offset commit) forwards the same rows again: the downstream inbox skips them.
	runForwarder(t, pool, ob, "forwarder-again", amqpPub)
	for range ids {
		o := next(t, outcomes)
		require.NoError(t, o.err)
		require.True(t, o.duplicate, "re-forwarded %s is a duplicate", o.uuid)
		require.Contains(t, ids, o.uuid)
	}
	require.ElementsMatch(t, ids, r.uuids(t), "one receipt per message")
}

func TestPublishRunsWithTheHandlersContext(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	ob := newOutbox(t, pool)
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })

	// The emitted message has no context of its own: the insert must still see the
	// handler's, here already cancelled.
	ctx, cancel := context.WithCancel(inbox.ContextWithTx(context.Background(), tx))
	cancel()
	err = ob.Publish(ctx, "cashback", message.NewMessage(outbox.MessageID("billing", "order-1", "0"), []byte(`{}`)))
	require.ErrorIs(t, err, context.Canceled)
}
