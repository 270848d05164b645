package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// exerciseOffsetRewinds is the conformance case of records whose position cannot
// follow the stored offset (ErrOffsetRewound), and of the operator's reset.
func exerciseOffsetRewinds(t *testing.T, ctx context.Context, setup func(t *testing.T) (fixture, *inbox.Inbox)) {
	t.Run("OffsetsRefuseRecordsFromAnotherLog", func(t *testing.T) {
		fx, _ := setup(t)
		ib := newTestInbox(t, fx.store, inbox.Config{MaxOffsetRewind: 1000})
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		rec := func(offset int64, epoch int32, ts time.Time, id string) inbox.Position {
			p := inbox.Position{Topic: "orders", Partition: 0, Offset: offset, LeaderEpoch: epoch, Timestamp: ts}
			if id != "" {
				p.TopicID = []byte(id)
			}
			return p
		}
		_, err := creditOffsets(ctx, ib, fx.ledger, "billing", []inbox.Position{rec(5000, 3, t0, "topic-id-0000001"), rec(5001, 4, t0.Add(time.Second), "topic-id-0000001")}, 1)
		require.NoError(t, err)
		for _, tc := range []struct {
			name string
			p    inbox.Position
		}{
			{"the topic's ID changed", rec(5002, 4, t0.Add(2*time.Second), "topic-id-0000002")},
			{"past the offset with an older epoch", rec(5002, 3, t0.Add(2*time.Second), "")},
			{"below the offset with a newer epoch (a truncated log)", rec(4990, 5, t0, "")},
			{"below the offset, written after everything processed", rec(4990, inbox.NoLeaderEpoch, t0.Add(time.Hour), "")},
			{"further below than MaxOffsetRewind", rec(3000, inbox.NoLeaderEpoch, time.Time{}, "")},
		} {
			calls := 0
			_, err := ib.ProcessOffsets(ctx, "billing", []inbox.Position{tc.p}, func(context.Context, []int) error { calls++; return nil })
			require.ErrorIs(t, err, inbox.ErrOffsetRewound, tc.name)
			require.Contains(t, err.Error(), "inbox offsets reset", tc.name)
			require.Zero(t, calls, tc.name)
		}
		// Redeliveries that fit: below the offset, with an epoch, a time and an ID that fit.
		res, err := ib.ProcessOffsets(ctx, "billing", []inbox.Position{rec(4990, 2, t0.Add(-time.Hour), "topic-id-0000001"), rec(5001, 4, t0.Add(time.Second+5*time.Second), "")},
			func(context.Context, []int) error { return errors.New("fn must not run") })
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, res.Duplicate, "within TimestampSlack")
		require.Equal(t, int64(5002), offsetOf(ctx, t, ib, "billing", "orders", 0), "refusals moved nothing")
		// A span whose epoch grows moves the row, which then holds its last record's epoch.
		got, err := creditOffsets(ctx, ib, fx.ledger, "billing", []inbox.Position{rec(5002, 4, t0.Add(2*time.Second), ""), rec(5003, 5, t0.Add(3*time.Second), "")}, 1)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, got)
		require.Equal(t, int64(5004), offsetOf(ctx, t, ib, "billing", "orders", 0))
		res, err = ib.ProcessOffsets(ctx, "billing", []inbox.Position{rec(5003, 5, t0, "")}, func(context.Context, []int) error { return errors.New("fn must not run") })
		require.NoError(t, err)
		require.Equal(t, []bool{true}, res.Duplicate)
		_, err = ib.ProcessOffsets(ctx, "billing", []inbox.Position{rec(5003, 6, t0, "")}, func(context.Context, []int) error { return errors.New("fn must not run") })
		require.ErrorIs(t, err, inbox.ErrOffsetRewound, "the stored epoch is the last record's, 5")

		// An operator resets the offset: the re-created topic's records are new.
		found, err := ib.SetOffset(ctx, "billing", "orders", 0, 0)
		require.NoError(t, err)
		require.True(t, found)
		got, err = creditOffsets(ctx, ib, fx.ledger, "billing", []inbox.Position{rec(0, 0, t0.Add(time.Hour), "topic-id-0000002"), rec(1, 0, t0.Add(time.Hour), "topic-id-0000002")}, 1)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, got)
		found, err = ib.SetOffset(ctx, "billing", "orders", 0, -1)
		require.NoError(t, err)
		require.True(t, found)
		found, err = ib.SetOffset(ctx, "billing", "orders", 0, -1)
		require.NoError(t, err)
		require.False(t, found)
		offsets, err := ib.Offsets(ctx, "billing")
		require.NoError(t, err)
		require.Empty(t, offsets, "a negative offset deletes the row")

		// TimestampSlack < 0 turns the time check off.
		lax := newTestInbox(t, fx.store, inbox.Config{TimestampSlack: -1})
		_, err = creditOffsets(ctx, lax, fx.ledger, "lax", []inbox.Position{rec(10, 1, t0, "")}, 1)
		require.NoError(t, err)
		res, err = lax.ProcessOffsets(ctx, "lax", []inbox.Position{rec(9, 1, t0.Add(time.Hour), "")}, func(context.Context, []int) error { return nil })
		require.NoError(t, err)
		require.Equal(t, []bool{true}, res.Duplicate)
	})

}
