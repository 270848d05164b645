package inbox_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The middleware in offset mode (Config.Position), on every flavour that keeps offsets.
// Messages carry their position in metadata, as a broker-specific PositionFunc
// (kafkakey.Partition) reads it from watermill-kafka's context: the Kafka end-to-end
// tests run the real one.

// positionFromMetadata reads a position from the metadata topic, partition and offset.
func positionFromMetadata(msg *message.Message) (inbox.Position, error) {
	part, err1 := strconv.Atoi(msg.Metadata.Get("partition"))
	off, err2 := strconv.ParseInt(msg.Metadata.Get("offset"), 10, 64)
	if msg.Metadata.Get("topic") == "" || err1 != nil || err2 != nil {
		return inbox.Position{}, fmt.Errorf("%w: no topic, partition and offset in the metadata", inbox.ErrNoKey)
	}
	return inbox.Position{Topic: msg.Metadata.Get("topic"), Partition: int32(part), Offset: off, LeaderEpoch: inbox.NoLeaderEpoch}, nil
}

// record returns a message at a position, with a fresh UUID (as a consumer gets a copy
// of the record on each delivery).
func record(topic string, partition int32, offset int64) *message.Message {
	msg := message.NewMessage(fmt.Sprintf("%s-%d-%d-uuid", topic, partition, offset), []byte("credit"))
	msg.Metadata.Set("topic", topic)
	msg.Metadata.Set("partition", strconv.Itoa(int(partition)))
	msg.Metadata.Set("offset", strconv.FormatInt(offset, 10))
	return msg
}

// record returns a message at a position for the flavour's cases, naming its tenant.
func (f storeFlavour) record(topic string, partition int32, offset int64) *message.Message {
	msg := record(topic, partition, offset)
	if f.tenant != "" {
		msg.Metadata.Set(inbox.DefaultTenantMetadata, f.tenant)
	}
	return msg
}

// slowCredit is ib's middleware around a handler that credits the ledger.
func slowCredit(ib *inbox.Inbox, fx fixture) message.HandlerFunc {
	return ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		return nil, fx.ledger.credit(msg.Context(), 1)
	})
}

func exerciseOffsetMiddleware(t *testing.T, f storeFlavour) {
	ctx := f.context()
	setup := func(t *testing.T, cfg inbox.Config) (fixture, *inbox.Inbox, *observations) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		obs := &observations{}
		cfg.Position, cfg.Observer = positionFromMetadata, obs
		return fx, newTestInbox(t, fx.store, cfg), obs
	}

	t.Run("OffsetMiddlewareSkipsRedeliveriesAndReplaysTheLastOutput", func(t *testing.T) {
		fx, ib, obs := setup(t, inbox.Config{})
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if err := fx.ledger.credit(msg.Context(), 10); err != nil {
				return nil, err
			}
			return []*message.Message{message.NewMessage("out-"+msg.Metadata.Get("offset"), nil)}, nil
		})
		for off := range int64(3) {
			out, err := h(f.record("orders", 2, off))
			require.NoError(t, err)
			require.Len(t, out, 1)
		}
		// The last record again (its output may not have been published: replayed), then
		// an earlier one (its output went out before the next record came: nothing).
		again := f.record("orders", 2, 2)
		out, err := h(again)
		require.NoError(t, err)
		require.Len(t, out, 1)
		require.Equal(t, "out-2", out[0].UUID)
		require.Equal(t, "true", again.Metadata.Get(inbox.MetadataDuplicate))
		require.Equal(t, string(inbox.OutcomeReplayed), again.Metadata.Get(inbox.MetadataOutcome))
		out, err = h(f.record("orders", 2, 0))
		require.NoError(t, err)
		require.Empty(t, out)
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 30, total)
		require.Equal(t, int64(3), offsetOf(ctx, t, ib, "billing", "orders", 2))
		require.Equal(t, map[inbox.Outcome]int{inbox.OutcomeProcessed: 3, inbox.OutcomeReplayed: 1, inbox.OutcomeDuplicate: 1}, outcomeCounts(obs))

		// A new record clears the stored output: a handler that produced nothing.
		_, err = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) { return nil, nil })(f.record("orders", 2, 3))
		require.NoError(t, err)
		out, err = h(f.record("orders", 2, 3))
		require.NoError(t, err)
		require.Empty(t, out)
	})

	t.Run("OffsetMiddlewareFailureRollsBackAndFailModes", func(t *testing.T) {
		fx, ib, _ := setup(t, inbox.Config{OnDuplicate: inbox.Fail})
		calls := 0
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			calls++
			if err := fx.ledger.credit(msg.Context(), 1); err != nil {
				return nil, err
			}
			if calls == 1 {
				return nil, errors.New("provider timed out")
			}
			return nil, nil
		})
		_, err := h(f.record("orders", 0, 7))
		require.Error(t, err)
		require.Equal(t, int64(-1), offsetOf(ctx, t, ib, "billing", "orders", 0), "the first record's row rolled back with the handler")
		_, err = h(f.record("orders", 0, 7))
		require.NoError(t, err, "the redelivery is processed")
		_, err = h(f.record("orders", 0, 7))
		require.ErrorIs(t, err, inbox.ErrDuplicate)
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 1, total)
	})

	t.Run("OffsetMiddlewareRefusesWhatWouldLoseMessages", func(t *testing.T) {
		fx, ib, obs := setup(t, inbox.Config{})
		calls := 0
		plain := ib.Middleware(func(*message.Message) ([]*message.Message, error) { calls++; return nil, nil })
		_, err := plain(f.message("no-position", nil))
		require.ErrorIs(t, err, inbox.ErrNoKey, "a message without a partition and offset")
		require.Zero(t, calls)
		require.Equal(t, 1, outcomeCounts(obs)[inbox.OutcomeNoKey])

		// A second message of a partition while one is in the middleware: a subscriber
		// delivering a partition concurrently, or an early ack.
		inHandler, release, first := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		slow := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			close(inHandler)
			<-release
			return nil, fx.ledger.credit(msg.Context(), 1)
		})
		go func() { _, err := slow(f.record("orders", 5, 1)); first <- err }()
		<-inHandler
		_, err = plain(f.record("orders", 5, 2))
		require.ErrorIs(t, err, inbox.ErrNotInOrder)
		other := make(chan error, 1)
		switch {
		case fx.handle != pooled: // a single connection serves one message at a time anyway
		case f.caps.oneWriter: // another partition waits for the database's one writer, and is not refused
			go func() { _, err := plain(f.record("orders", 6, 2)); other <- err }()
		default:
			_, err = plain(f.record("orders", 6, 2))
			require.NoError(t, err, "another partition is not held up")
		}
		close(release)
		require.NoError(t, <-first)
		if fx.handle == pooled && f.caps.oneWriter {
			require.NoError(t, <-other, "another partition is not refused")
		}
		_, err = plain(f.record("orders", 5, 2))
		require.NoError(t, err, "once the first left, the next one goes")

		// A message acked before the inbox (InstantAck in front of it): refused on its
		// own, whether or not the next one overlaps it, and not processed.
		early := f.record("orders", 5, 3)
		early.Ack()
		_, err = slowCredit(ib, fx)(early)
		require.ErrorIs(t, err, inbox.ErrNotInOrder)
		require.ErrorContains(t, err, "InstantAck")
		_, err = plain(f.record("orders", 5, 3))
		require.NoError(t, err, "the refusal left the partition free")
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 1, total, "the early-acked message was not processed")
	})

	t.Run("OffsetMiddlewareJoinsTransactionFromContext", func(t *testing.T) {
		if f.caps.noJoin {
			t.Skip("the store has no transaction of the caller's to join")
		}
		fx, ib, _ := setup(t, inbox.Config{})
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			return nil, fx.ledger.credit(msg.Context(), 1)
		})
		for _, commit := range []bool{false, true} {
			tx, end := fx.beginOther(t)
			msg := f.record("orders", 0, 0)
			msg.SetContext(inbox.ContextWithTx(ctx, tx))
			_, err := h(msg)
			require.NoError(t, err)
			require.Empty(t, msg.Metadata.Get(inbox.MetadataDuplicate))
			require.NoError(t, end(commit))
		}
		msg := f.record("orders", 0, 0)
		_, err := h(msg)
		require.NoError(t, err)
		require.Equal(t, "true", msg.Metadata.Get(inbox.MetadataDuplicate))
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 1, total)

		// Acked before the inbox (InstantAck), in the owner's transaction: refused before
		// the inbox writes anything there, and the owner's transaction goes on and commits.
		tx, end := fx.beginOther(t)
		early := f.record("orders", 0, 1)
		early.Ack()
		early.SetContext(inbox.ContextWithTx(ctx, tx))
		_, err = h(early)
		require.ErrorIs(t, err, inbox.ErrNotInOrder)
		require.NoError(t, end(true), "the owner's transaction survives the refusal")
		next := f.record("orders", 0, 1)
		_, err = h(next)
		require.NoError(t, err)
		require.Empty(t, next.Metadata.Get(inbox.MetadataDuplicate), "the refused record's offset was not stored")
		total, _ = fx.ledger.balance(t)
		require.Equal(t, 2, total)
	})

	t.Run("OffsetModeConfig", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		_, err := inbox.New(inbox.Config{Store: fx.store, Consumer: "billing", Position: positionFromMetadata, Key: inbox.KeyFromUUID})
		require.ErrorContains(t, err, "Key and Position")
		// Offset mode counts no attempts: MaxAttempts would be silently ignored, so a
		// record that crashes the process would never be stopped; New says so instead.
		_, err = inbox.New(inbox.Config{Store: fx.store, Consumer: "billing", Position: positionFromMetadata, MaxAttempts: 3})
		require.ErrorContains(t, err, "MaxAttempts is 3 and Position is set")
		require.ErrorContains(t, err, "set MaxAttempts to 0")
		require.ErrorContains(t, err, "inbox offsets reset")
		_, err = inbox.New(inbox.Config{Store: fx.store, Consumer: "billing", MaxOffsetRewind: -1})
		require.ErrorContains(t, err, "MaxOffsetRewind")
		if f.missing != nil {
			_, err = inbox.New(inbox.Config{Store: f.missing(t), Consumer: "billing", Position: positionFromMetadata})
			require.ErrorIs(t, err, inbox.ErrNoTable)
		}
	})
}

// outcomeCounts counts the outcomes observed so far.
func outcomeCounts(obs *observations) map[inbox.Outcome]int {
	obs.mu.Lock()
	defer obs.mu.Unlock()
	n := map[inbox.Outcome]int{}
	for _, o := range obs.seen {
		n[o.o.Outcome]++
	}
	return n
}
