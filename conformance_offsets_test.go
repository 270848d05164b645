package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The conformance cases of offset mode (inbox.OffsetStore, Inbox.ProcessOffsets), on
// every flavour whose store keeps offsets; a flavour that declares noOffsets must
// refuse offset mode clearly instead. The middleware's offset mode: offsets_middleware_test.go.

// at returns the positions of offsets in one partition, epochs and times unknown.
func at(topic string, partition int32, offsets ...int64) []inbox.Position {
	out := make([]inbox.Position, len(offsets))
	for i, o := range offsets {
		out[i] = inbox.Position{Topic: topic, Partition: partition, Offset: o, LeaderEpoch: inbox.NoLeaderEpoch}
	}
	return out
}

// creditOffsets processes positions for consumer with a handler that credits amount
// per new record, and returns the indexes it got.
func creditOffsets(ctx context.Context, ib *inbox.Inbox, l ledger, consumer string, positions []inbox.Position, amount int) ([]int, error) {
	var got []int
	_, err := ib.ProcessOffsets(ctx, consumer, positions, func(ctx context.Context, fresh []int) error {
		got = append([]int(nil), fresh...)
		for range fresh {
			if err := l.credit(ctx, amount); err != nil {
				return err
			}
		}
		return nil
	})
	return got, err
}

func exerciseOffsets(t *testing.T, f storeFlavour) {
	ctx := f.context()
	setup := func(t *testing.T) (fixture, *inbox.Inbox) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		return fx, newTestInbox(t, fx.store, inbox.Config{})
	}
	if f.caps.noOffsets {
		t.Run("OffsetModeRefusedClearly", func(t *testing.T) {
			fx, ib := setup(t)
			calls := 0
			_, err := ib.ProcessOffsets(ctx, "billing", at("orders", 0, 1), func(context.Context, []int) error { calls++; return nil })
			require.ErrorIs(t, err, errors.ErrUnsupported)
			require.Zero(t, calls)
			_, err = inbox.New(inbox.Config{Store: fx.store, Consumer: "billing", Position: positionFromMetadata})
			require.Error(t, err, "New refuses offset mode on the store")
		})
		return
	}

	exerciseOffsetMiddleware(t, f)

	t.Run("OffsetsMoveForwardAndRecordsBelowAreDuplicates", func(t *testing.T) {
		fx, ib := setup(t)
		require.Implements(t, (*inbox.OffsetStore)(nil), fx.store, "a flavour without noOffsets keeps offsets")
		got, err := creditOffsets(ctx, ib, fx.ledger, "billing", at("orders", 0, 10, 11, 12, 14), 1)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1, 2, 3}, got, "a partition without a row: every record is new")
		calls := 0
		res, err := ib.ProcessOffsets(ctx, "billing", at("orders", 0, 10, 11, 12, 14), func(context.Context, []int) error { calls++; return nil })
		require.NoError(t, err)
		require.Zero(t, calls, "the same records again: fn is not called")
		require.Equal(t, []bool{true, true, true, true}, res.Duplicate)
		// Overlapping the stored position: the records past it are new, in one batch with
		// another partition and another topic.
		batch := append(at("orders", 0, 13, 14, 15, 16), append(at("orders", 3, 0, 1), at("refunds", 0, 7)...)...)
		got, err = creditOffsets(ctx, ib, fx.ledger, "billing", batch, 1)
		require.NoError(t, err)
		require.Equal(t, []int{2, 3, 4, 5, 6}, got, "13 and 14 are below the stored 15 (the gap at 13 is a gap: compacted or a marker)")
		offsets, err := ib.Offsets(ctx, "billing")
		require.NoError(t, err)
		require.Len(t, offsets, 3)
		for i, want := range []struct {
			topic string
			part  int32
			next  int64
		}{{"orders", 0, 17}, {"orders", 3, 2}, {"refunds", 0, 8}} {
			require.Equal(t, want.topic, offsets[i].Topic)
			require.Equal(t, want.part, offsets[i].Partition)
			require.Equal(t, want.next, offsets[i].Next)
			require.WithinDuration(t, time.Now(), offsets[i].UpdatedAt, time.Minute)
		}
		total, credits := fx.ledger.balance(t)
		require.Equal(t, [2]int{9, 9}, [2]int{total, credits})
		// Offsets are per consumer.
		got, err = creditOffsets(ctx, ib, fx.ledger, "notifications", at("orders", 0, 10), 1)
		require.NoError(t, err)
		require.Equal(t, []int{0}, got)
		all, err := ib.Offsets(ctx, "")
		require.NoError(t, err)
		require.Len(t, all, 4)
		require.Equal(t, "billing", all[0].Consumer)
		require.Equal(t, "notifications", all[3].Consumer)
	})

	t.Run("OffsetsRollBackWithTheHandler", func(t *testing.T) {
		fx, ib := setup(t)
		_, err := creditOffsets(ctx, ib, fx.ledger, "billing", at("orders", 1, 0, 1), 1)
		require.NoError(t, err)
		boom := errors.New("provider timed out")
		batch := at("orders", 1, 1, 2, 3)
		_, err = ib.ProcessOffsets(ctx, "billing", batch, func(ctx context.Context, fresh []int) error {
			require.Equal(t, []int{1, 2}, fresh)
			require.NoError(t, fx.ledger.credit(ctx, 100))
			return boom
		})
		require.ErrorIs(t, err, boom)
		func() {
			defer func() { require.Equal(t, "handler bug", recover()) }()
			_, _ = ib.ProcessOffsets(ctx, "billing", batch, func(ctx context.Context, fresh []int) error {
				require.NoError(t, fx.ledger.credit(ctx, 100))
				panic("handler bug")
			})
		}()
		require.Equal(t, int64(2), offsetOf(ctx, t, ib, "billing", "orders", 1), "the offset rolled back with the handler's writes")
		got, err := creditOffsets(ctx, ib, fx.ledger, "billing", batch, 100)
		require.NoError(t, err)
		require.Equal(t, []int{1, 2}, got, "the retry gets the same new records")
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 202, total)
	})

	t.Run("OffsetsRefuseRecordsOutOfOrderOrWithoutAPosition", func(t *testing.T) {
		fx, ib := setup(t)
		for _, tc := range []struct {
			batch []inbox.Position
			bad   int
			want  error
		}{
			{append(at("orders", 0, 5, 6), at("orders", 0, 6)...), 2, inbox.ErrNotInOrder},
			{append(at("orders", 0, 5), append(at("orders", 1, 9), at("orders", 0, 4)...)...), 2, inbox.ErrNotInOrder},
			{append(at("orders", 0, 5), at("", 0, 6)...), 1, inbox.ErrNoKey},
			{append(at("orders", 0, 5), at("orders", 0, -1)...), 1, inbox.ErrNoKey},
			{append(at("orders", 0, 5), at("orders", -2, 6)...), 1, inbox.ErrNoKey},
		} {
			calls := 0
			_, err := ib.ProcessOffsets(ctx, "billing", tc.batch, func(context.Context, []int) error { calls++; return nil })
			var itemErr *inbox.BatchItemError
			require.ErrorAs(t, err, &itemErr)
			require.Equal(t, tc.bad, itemErr.Index)
			require.ErrorIs(t, err, tc.want)
			require.Zero(t, calls)
		}
		offsets, err := ib.Offsets(ctx, "billing")
		require.NoError(t, err)
		require.Empty(t, offsets, "nothing was claimed")
		total, _ := fx.ledger.balance(t)
		require.Zero(t, total)
	})

	exerciseOffsetRewinds(t, ctx, setup)

	for _, firstCommits := range []bool{true, false} {
		name := "ConcurrentClaimOfAPartitionWaitsThenSkips"
		if !firstCommits {
			name = "ConcurrentClaimOfAPartitionWaitsThenProcesses"
		}
		t.Run(name, func(t *testing.T) {
			fx, ib := setup(t)
			for _, start := range []bool{false, true} { // a partition with no row yet, then with one
				base := int64(0)
				if start {
					base = 100
					_, err := creditOffsets(ctx, ib, fx.ledger, "billing", at("orders", 0, 99), 0)
					require.NoError(t, err)
				}
				h := holdClaim(t, firstCommits, func(hold func() error) error {
					_, err := ib.ProcessOffsets(ctx, "billing", at("orders", 0, base, base+1), func(ctx context.Context, fresh []int) error {
						for range fresh {
							if err := fx.ledger.credit(ctx, 1); err != nil {
								return err
							}
						}
						return hold()
					})
					return err
				})
				peer := newTestInbox(t, fx.peer(t), inbox.Config{})
				// The rival is the partition's new owner, during a rebalance.
				second, err := raceHeld(t, h, "the new owner must wait for the old owner's transaction", func() ([]int, error) {
					return creditOffsets(ctx, peer, fx.ledger, "billing", at("orders", 0, base, base+1, base+2), 1)
				})
				v := second[0]
				require.NoError(t, v.err)
				if firstCommits {
					require.NoError(t, err)
					require.Equal(t, []int{2}, v.got, "it sees the offset the old owner committed")
				} else {
					require.Error(t, err)
					require.Equal(t, []int{0, 1, 2}, v.got)
				}
				require.Equal(t, base+3, offsetOf(ctx, t, ib, "billing", "orders", 0))
			}
			total, credits := fx.ledger.balance(t)
			require.Equal(t, [2]int{6, 7}, [2]int{total, credits}, "each record applied once")
		})
	}

	t.Run("OffsetsJoinTransactionFromContext", func(t *testing.T) {
		if f.caps.noJoin {
			t.Skip("the store has no transaction of the caller's to join")
		}
		fx, ib := setup(t)
		for _, commit := range []bool{false, true} {
			begin := fx.begin
			if !commit {
				begin = fx.beginOther
			}
			tx, end := begin(t)
			got, err := creditOffsets(inbox.ContextWithTx(ctx, tx), ib, fx.ledger, "billing", at("orders", 0, 0, 1), 5)
			require.NoError(t, err)
			require.Equal(t, []int{0, 1}, got, "new until a joined transaction commits")
			require.NoError(t, end(commit))
		}
		got, err := creditOffsets(ctx, ib, fx.ledger, "billing", at("orders", 0, 1, 2), 5)
		require.NoError(t, err)
		require.Equal(t, []int{1}, got)
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 15, total)
	})

	t.Run("OffsetsLockTimeoutBoundsTheWait", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{lockTimeout: 500 * time.Millisecond})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		_, err := creditOffsets(ctx, ib, fx.ledger, "billing", at("orders", 0, 0), 1)
		require.NoError(t, err)
		h := holdClaim(t, true, func(hold func() error) error {
			_, err := ib.ProcessOffsets(ctx, "billing", at("orders", 0, 1), func(context.Context, []int) error { return hold() })
			return err
		})
		requireBoundedWait(t, h, func() error {
			_, err := creditOffsets(ctx, newTestInbox(t, fx.peer(t), inbox.Config{}), fx.ledger, "billing", at("orders", 0, 1, 2), 1)
			return err
		})
	})

	t.Run("OffsetsCancelledContextRollsBack", func(t *testing.T) {
		fx, ib := setup(t)
		cctx, cancel := context.WithCancel(ctx)
		_, err := ib.ProcessOffsets(cctx, "billing", at("orders", 0, 0, 1), func(txCtx context.Context, fresh []int) error {
			require.NoError(t, fx.ledger.credit(txCtx, 1))
			cancel()
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		total, _ := fx.ledger.balance(t)
		require.Zero(t, total)
		got, err := creditOffsets(ctx, ib, fx.ledger, "billing", at("orders", 0, 0, 1), 1)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, got)
	})

	t.Run("OffsetsRacingClaimsApplyEachRecordOnce", func(t *testing.T) {
		fx, _ := setup(t)
		// Workers deliver overlapping runs of 4 partitions' records, in order per
		// partition, as consumers of one group do across rebalances.
		const workers, records = 5, 30
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			peer := newTestInbox(t, fx.peer(t), inbox.Config{})
			wg.Go(func() {
				// Every worker starts at offset 0, so each partition's row starts there too.
				for from := int64(0); from < records; from += 1 + int64(w%3) {
					var batch []inbox.Position
					for p := range int32(4) {
						batch = append(batch, at("orders", (p+int32(w))%4, from, from+1, from+2, from+3)...)
					}
					for {
						_, err := creditOffsets(ctx, peer, fx.ledger, "billing", batch, 1)
						if !errors.Is(err, inbox.ErrContended) {
							if err != nil {
								errs <- err
								return
							}
							break
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		// Whatever the interleaving, each partition holds a contiguous run from its first
		// record: the ledger has one credit per offset below each stored next offset.
		offsets, err := newTestInbox(t, fx.store, inbox.Config{}).Offsets(ctx, "billing")
		require.NoError(t, err)
		require.Len(t, offsets, 4)
		var want int64
		for _, o := range offsets {
			want += o.Next
		}
		total, credits := fx.ledger.balance(t)
		require.EqualValues(t, want, total, "each record below the offsets applied exactly once")
		require.EqualValues(t, want, credits)
	})
}

// offsetOf returns consumer's stored next offset of one partition, -1 without a row.
func offsetOf(ctx context.Context, t *testing.T, ib *inbox.Inbox, consumer, topic string, partition int32) int64 {
	t.Helper()
	offsets, err := ib.Offsets(ctx, consumer)
	require.NoError(t, err)
	for _, o := range offsets {
		if o.Topic == topic && o.Partition == partition {
			return o.Next
		}
	}
	return -1
}
