package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// observed is one Observe call: the context it got and the record.
type observed struct {
	ctx context.Context
	o   inbox.Observation
}

// observations keeps every Observe call, in order.
type observations struct {
	mu   sync.Mutex
	seen []observed
}

func (r *observations) Observe(ctx context.Context, o inbox.Observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, observed{ctx, o})
}

// take returns the calls since the last take.
func (r *observations) take() []observed {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.seen
	r.seen = nil
	return seen
}

// one returns the only call since the last take.
func (r *observations) one(t *testing.T) observed {
	t.Helper()
	seen := r.take()
	require.Len(t, seen, 1, "one observation per message")
	return seen[0]
}

type ctxMark struct{}

// markedMsg returns a message whose context carries a mark the observer must see.
func markedMsg(uuid, payload, mark string) *message.Message {
	msg := message.NewMessage(uuid, []byte(payload))
	msg.SetContext(context.WithValue(context.Background(), ctxMark{}, mark))
	return msg
}

func TestObserver_GetsTheMessageContextAndRecord(t *testing.T) {
	obs := &observations{}
	ib, l := pgxSetup(t, inbox.Config{Observer: obs})
	var calls atomic.Int32
	receipt := message.NewMessage("receipt-1", []byte("1.90"))
	producing := ib.Middleware(crediting(l, &calls, receipt))
	var staleSeen atomic.Int32
	plain := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get(inbox.MetadataOutcome) != "" || msg.Metadata.Get(inbox.MetadataClaimWait) != "" {
			staleSeen.Add(1) // the handler must not see the outcome of an earlier attempt
		}
		return crediting(l, &calls)(msg)
	})
	boom := errors.New("provider timed out")
	failing := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, boom })

	steps := []struct {
		name    string
		h       message.HandlerFunc
		msg     *message.Message
		want    inbox.Outcome
		wantErr error
	}{
		{name: "first delivery", h: producing, msg: markedMsg("order-1", "a", "m1"), want: inbox.OutcomeProcessed},
		{name: "redelivery replays", h: producing, msg: markedMsg("order-1", "a", "m2"), want: inbox.OutcomeReplayed},
		{name: "same key, other payload", h: producing, msg: markedMsg("order-1", "b", "m3"), want: inbox.OutcomeMismatch},
		{name: "first delivery without output", h: plain, msg: markedMsg("order-2", "a", "m4"), want: inbox.OutcomeProcessed},
		{name: "redelivery skipped", h: plain, msg: markedMsg("order-2", "a", "m5"), want: inbox.OutcomeDuplicate},
		{name: "handler error", h: failing, msg: markedMsg("order-3", "a", "m6"), want: inbox.OutcomeFailed, wantErr: boom},
	}
	for _, s := range steps {
		// A copy of an earlier attempt's message (Kafka's in-process resend) carries
		// its marks: they are cleared on entry.
		s.msg.Metadata.Set(inbox.MetadataOutcome, "stale")
		s.msg.Metadata.Set(inbox.MetadataClaimWait, "1h")
		s.msg.Metadata.Set(inbox.MetadataDuplicate, "true")
		_, err := s.h(s.msg)
		require.ErrorIs(t, err, s.wantErr, s.name)

		got := obs.one(t)
		require.Equal(t, s.msg.Context().Value(ctxMark{}), got.ctx.Value(ctxMark{}), "%s: the message's context", s.name)
		_, inTx := inbox.TxFromContext[pgx.Tx](got.ctx)
		require.False(t, inTx, "%s: the observer does not get the inbox transaction", s.name)
		require.Equal(t, "billing", got.o.Consumer, s.name)
		require.Equal(t, s.msg.UUID, got.o.Key, "%s: the key (KeyFromUUID)", s.name)
		require.Equal(t, s.msg.UUID, got.o.MessageUUID, s.name)
		require.Equal(t, s.want, got.o.Outcome, s.name)
		require.Positive(t, got.o.ClaimWait, "%s: a claim was made", s.name)
		require.ErrorIs(t, got.o.Err, s.wantErr, s.name)
		if s.wantErr == nil {
			require.NoError(t, got.o.Err, s.name)
		}
		require.Equal(t, string(s.want), s.msg.Metadata.Get(inbox.MetadataOutcome), "%s: the outcome in the metadata", s.name)
		wait, err := time.ParseDuration(s.msg.Metadata.Get(inbox.MetadataClaimWait))
		require.NoError(t, err, s.name)
		require.Equal(t, got.o.ClaimWait, wait, "%s: the claim wait in the metadata", s.name)
		isDup := s.want == inbox.OutcomeDuplicate || s.want == inbox.OutcomeReplayed || s.want == inbox.OutcomeMismatch
		require.Equal(t, isDup, s.msg.Metadata.Get(inbox.MetadataDuplicate) == "true", "%s: the duplicate mark", s.name)
		require.Equal(t, s.want == inbox.OutcomeMismatch, s.msg.Metadata.Get(inbox.MetadataMismatch) == "true", "%s: the mismatch mark", s.name)
	}
	require.EqualValues(t, 2, calls.Load(), "the crediting handlers ran for the two first deliveries only")
	require.Zero(t, staleSeen.Load(), "a stale outcome was visible to the handler")
}

func TestObserver_DuplicateRefusedByFailIsNotAnError(t *testing.T) {
	obs := &observations{}
	ib, l := pgxSetup(t, inbox.Config{Observer: obs, OnDuplicate: inbox.Fail})
	var calls atomic.Int32
	h := ib.Middleware(crediting(l, &calls))
	_, err := h(message.NewMessage("order-1", nil))
	require.NoError(t, err)
	obs.take()
	msg := message.NewMessage("order-1", nil)
	_, err = h(msg)
	require.ErrorIs(t, err, inbox.ErrDuplicate, "the router nacks it")
	got := obs.one(t)
	require.Equal(t, inbox.OutcomeDuplicate, got.o.Outcome)
	require.NoError(t, got.o.Err, "a duplicate is no failure, whatever the mode")
	require.Equal(t, string(inbox.OutcomeDuplicate), msg.Metadata.Get(inbox.MetadataOutcome))
}

func TestObserver_Process(t *testing.T) {
	obs := &observations{}
	ib, l := pgxSetup(t, inbox.Config{Observer: obs})
	ctx := context.WithValue(context.Background(), ctxMark{}, "webhook")
	for _, want := range []inbox.Outcome{inbox.OutcomeProcessed, inbox.OutcomeDuplicate} {
		_, err := creditOnce(ctx, ib, l, "webhooks", "delivery-1", 190)
		require.NoError(t, err)
		got := obs.one(t)
		require.Equal(t, "webhook", got.ctx.Value(ctxMark{}), "Process's ctx")
		require.Equal(t, inbox.Observation{Consumer: "webhooks", Key: "delivery-1", Outcome: want, ClaimWait: got.o.ClaimWait}, got.o,
			"no message, so no UUID")
		require.Positive(t, got.o.ClaimWait)
	}
}

func TestObserver_NoKeyMakesNoClaim(t *testing.T) {
	obs := &observations{}
	ib, l := pgxSetup(t, inbox.Config{Observer: obs, Key: inbox.KeyFromMetadata("id")})
	var calls atomic.Int32
	msg := message.NewMessage("u-1", nil)
	_, err := ib.Middleware(crediting(l, &calls))(msg)
	require.ErrorIs(t, err, inbox.ErrNoKey)
	got := obs.one(t)
	require.Equal(t, inbox.OutcomeNoKey, got.o.Outcome)
	require.Zero(t, got.o.ClaimWait, "no claim was tried")
	require.Equal(t, "u-1", got.o.MessageUUID)
	require.Empty(t, got.o.Key)
	require.ErrorIs(t, got.o.Err, inbox.ErrNoKey)
	require.Equal(t, string(inbox.OutcomeNoKey), msg.Metadata.Get(inbox.MetadataOutcome))
	require.NotContains(t, msg.Metadata, inbox.MetadataClaimWait, "no claim, no wait")
}

// Every failure after a claim was tried reports that claim's real time, not zero.
func TestObserver_ClaimWaitOnFailures(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)

	t.Run("commit fails", func(t *testing.T) {
		t.Parallel()
		obs := &observations{}
		ib := newTestInbox(t, newPgxStore(t, pool, inbox.PostgresConfig{}), inbox.Config{Observer: obs})
		msg := message.NewMessage("order-1", nil)
		_, err := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
			return nil, tx.Rollback(msg.Context()) // ends the transaction behind the inbox's back
		})(msg)
		require.ErrorIs(t, err, inbox.ErrTxDone)
		got := obs.one(t)
		require.Equal(t, inbox.OutcomeFailed, got.o.Outcome)
		require.Positive(t, got.o.ClaimWait)
		require.ErrorIs(t, got.o.Err, inbox.ErrTxDone)
		require.Equal(t, "order-1", got.o.MessageUUID)
		require.Equal(t, string(inbox.OutcomeFailed), msg.Metadata.Get(inbox.MetadataOutcome))
	})

	t.Run("too many attempts", func(t *testing.T) {
		t.Parallel()
		obs := &observations{}
		store := newPgxStore(t, pool, inbox.PostgresConfig{})
		ib := newTestInbox(t, store, inbox.Config{Observer: obs, MaxAttempts: 1})
		crashedAttempt(t, context.Background(), store, "billing", "order-1")
		_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
			t.Error("the handler of a poisoned message ran")
			return nil, nil
		})(message.NewMessage("order-1", nil))
		require.ErrorIs(t, err, inbox.ErrTooManyAttempts)
		got := obs.one(t)
		require.Equal(t, inbox.OutcomeTooManyAttempts, got.o.Outcome)
		require.Positive(t, got.o.ClaimWait, "the key was claimed before the count refused it")
		require.ErrorIs(t, got.o.Err, inbox.ErrTooManyAttempts)
	})

	t.Run("claim fails", func(t *testing.T) {
		t.Parallel()
		obs := &observations{}
		table := tableName("observe")
		ib := newTestInbox(t, newPgxStore(t, pool, inbox.PostgresConfig{Table: table}), inbox.Config{Observer: obs})
		// The claim is sent and the database refuses it: the table went after New.
		_, err := pool.Exec(context.Background(), `DROP TABLE `+pgx.Identifier{table}.Sanitize())
		require.NoError(t, err)
		_, err = ib.Process(context.Background(), "billing", "order-1", func(context.Context) error { return nil })
		require.ErrorIs(t, err, inbox.ErrNoTable)
		got := obs.one(t)
		require.Equal(t, inbox.OutcomeFailed, got.o.Outcome)
		require.Positive(t, got.o.ClaimWait)
		require.ErrorIs(t, got.o.Err, inbox.ErrNoTable)
	})

	t.Run("contended", func(t *testing.T) {
		t.Parallel()
		const bound = 200 * time.Millisecond
		table := tableName("observe")
		first := newTestInbox(t, newPgxStore(t, pool, inbox.PostgresConfig{Table: table}), inbox.Config{})
		boundedStore, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table, LockTimeout: bound})
		require.NoError(t, err)
		obs := &observations{}
		bounded := newTestInbox(t, boundedStore, inbox.Config{Observer: obs})

		holding, release, firstDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := first.Process(context.Background(), "billing", "order-1", func(context.Context) error {
				close(holding)
				<-release
				return nil
			})
			firstDone <- err
		}()
		<-holding
		_, err = bounded.Process(context.Background(), "billing", "order-1", func(context.Context) error { return nil })
		close(release)
		require.NoError(t, <-firstDone)
		require.ErrorIs(t, err, inbox.ErrContended)
		got := obs.one(t)
		require.Equal(t, inbox.OutcomeContended, got.o.Outcome)
		require.GreaterOrEqual(t, got.o.ClaimWait, bound, "the claim waited for the lock timeout")
		require.ErrorIs(t, got.o.Err, inbox.ErrContended)
	})

	t.Run("handler panics", func(t *testing.T) {
		t.Parallel()
		obs := &observations{}
		ib := newTestInbox(t, newPgxStore(t, pool, inbox.PostgresConfig{}), inbox.Config{Observer: obs})
		require.Panics(t, func() {
			_, _ = ib.Middleware(func(*message.Message) ([]*message.Message, error) { panic("bug") })(message.NewMessage("order-1", nil))
		})
		got := obs.one(t)
		require.Equal(t, inbox.OutcomeFailed, got.o.Outcome)
		require.Positive(t, got.o.ClaimWait)
		require.ErrorContains(t, got.o.Err, "panicked")
	})
}
