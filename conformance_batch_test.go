package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The conformance cases of batches (inbox.BatchStore, Inbox.ProcessBatch), on every
// flavour whose store claims batches; a flavour that declares noBatch must refuse them
// clearly instead.

// items returns items with the given keys and no fingerprint.
func items(keys ...string) []inbox.Item {
	out := make([]inbox.Item, len(keys))
	for i, k := range keys {
		out[i] = inbox.Item{Key: k}
	}
	return out
}

// creditBatch processes items for consumer with a handler that credits amount per new
// item, and returns the indexes it got.
func creditBatch(ctx context.Context, ib *inbox.Inbox, l ledger, consumer string, its []inbox.Item, amount int) ([]int, inbox.BatchResult, error) {
	var got []int
	res, err := ib.ProcessBatch(ctx, consumer, its, func(ctx context.Context, fresh []int) error {
		got = append([]int(nil), fresh...)
		for range fresh {
			if err := l.credit(ctx, amount); err != nil {
				return err
			}
		}
		return nil
	})
	return got, res, err
}

func exerciseBatches(t *testing.T, f storeFlavour) {
	ctx := f.context()
	setup := func(t *testing.T) (fixture, *inbox.Inbox) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		return fx, newTestInbox(t, fx.store, inbox.Config{})
	}
	if f.caps.noBatch {
		t.Run("BatchRefusedClearly", func(t *testing.T) {
			fx, ib := setup(t)
			calls := 0
			_, err := ib.ProcessBatch(ctx, "billing", items("a", "b"), func(context.Context, []int) error { calls++; return nil })
			require.ErrorIs(t, err, errors.ErrUnsupported)
			require.Contains(t, err.Error(), "Process")
			require.Zero(t, calls)
			total, _ := fx.ledger.balance(t)
			require.Zero(t, total)
		})
		return
	}

	t.Run("BatchNewThenDuplicates", func(t *testing.T) {
		fx, ib := setup(t)
		require.Implements(t, (*inbox.BatchStore)(nil), fx.store, "a flavour without noBatch claims batches")
		// Unsorted, with a key twice: fn gets each key once, in the items' order.
		got, res, err := creditBatch(ctx, ib, fx.ledger, "billing", items("k3", "k1", "k2", "k1", "k5", "k4"), 10)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1, 2, 4, 5}, got)
		require.Equal(t, []bool{false, false, false, true, false, false}, res.Duplicate)
		require.Equal(t, 5, res.Processed)

		calls := 0
		res, err = ib.ProcessBatch(ctx, "billing", items("k1", "k2", "k3", "k4", "k5"), func(context.Context, []int) error { calls++; return nil })
		require.NoError(t, err)
		require.Zero(t, calls, "the same batch again gets none: fn is not called")
		require.Equal(t, []bool{true, true, true, true, true}, res.Duplicate)
		require.Zero(t, res.Processed)
		total, credits := fx.ledger.balance(t)
		require.Equal(t, [2]int{50, 5}, [2]int{total, credits})

		res, err = ib.ProcessBatch(ctx, "billing", nil, func(context.Context, []int) error { calls++; return nil })
		require.NoError(t, err)
		require.Zero(t, calls)
		require.Empty(t, res.Duplicate)
	})

	t.Run("BatchSharesTheKeySpaceWithSingleMessages", func(t *testing.T) {
		fx, ib := setup(t)
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "alone", 1)
		require.NoError(t, err)
		require.False(t, dup)
		got, res, err := creditBatch(ctx, ib, fx.ledger, "billing", items("alone", "batched"), 1)
		require.NoError(t, err)
		require.Equal(t, []int{1}, got, "a key processed alone is a duplicate in a batch")
		require.Equal(t, []bool{true, false}, res.Duplicate)
		dup, err = creditOnce(ctx, ib, fx.ledger, "billing", "batched", 1)
		require.NoError(t, err)
		require.True(t, dup, "a key processed in a batch is a duplicate alone")
		_, _, err = creditBatch(ctx, ib, fx.ledger, "notifications", items("alone", "batched"), 1)
		require.NoError(t, err)
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 4, total, "keys are per consumer")
	})

	t.Run("BatchFailureLeavesNothingAndTheRetryGetsTheSameNew", func(t *testing.T) {
		fx, ib := setup(t)
		_, _, err := creditBatch(ctx, ib, fx.ledger, "billing", items("old"), 1)
		require.NoError(t, err)
		batch := items("new-2", "old", "new-1")
		boom := errors.New("provider timed out")
		var first []int
		_, err = ib.ProcessBatch(ctx, "billing", batch, func(ctx context.Context, fresh []int) error {
			first = fresh
			for range fresh {
				require.NoError(t, fx.ledger.credit(ctx, 100))
			}
			return boom
		})
		require.ErrorIs(t, err, boom, "fn's error comes back unchanged")
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 1, total, "the failed batch's writes rolled back")

		func() {
			defer func() { require.Equal(t, "handler bug", recover()) }()
			_, _ = ib.ProcessBatch(ctx, "billing", batch, func(ctx context.Context, fresh []int) error {
				require.NoError(t, fx.ledger.credit(ctx, 100))
				panic("handler bug")
			})
		}()
		total, _ = fx.ledger.balance(t)
		require.Equal(t, 1, total, "the panicking batch's writes rolled back")

		got, _, err := creditBatch(ctx, ib, fx.ledger, "billing", batch, 100)
		require.NoError(t, err)
		require.Equal(t, first, got, "the retry gets the same new messages")
		require.Equal(t, []int{0, 2}, got)
		total, credits := fx.ledger.balance(t)
		require.Equal(t, [2]int{201, 3}, [2]int{total, credits})
	})

	for _, firstCommits := range []bool{true, false} {
		name := "BatchWaitsForAHeldKeyThenSkipsIt"
		if !firstCommits {
			name = "BatchWaitsForAHeldKeyThenProcessesIt"
		}
		t.Run(name, func(t *testing.T) {
			fx, ib := setup(t)
			h := holdCredit(ctx, t, ib, fx.ledger, "held", 1000, firstCommits)
			peer := newTestInbox(t, fx.peer(t), inbox.Config{})
			second, err := raceHeld(t, h, "the batch must wait for the transaction holding one of its keys", func() ([]int, error) {
				got, _, err := creditBatch(ctx, peer, fx.ledger, "billing", items("a", "held", "z"), 1000)
				return got, err
			})
			v := second[0]
			require.NoError(t, v.err)
			if firstCommits {
				require.NoError(t, err)
				require.Equal(t, []int{0, 2}, v.got)
			} else {
				require.Error(t, err)
				require.Equal(t, []int{0, 1, 2}, v.got)
			}
			total, credits := fx.ledger.balance(t)
			require.Equal(t, [2]int{3000, 3}, [2]int{total, credits})
		})
	}

	t.Run("OverlappingBatchesRacingApplyEachMessageOnce", func(t *testing.T) {
		fx, _ := setup(t)
		const keys, workers, rounds = 40, 6, 4
		var wg sync.WaitGroup
		errs := make(chan error, workers*rounds)
		for w := range workers {
			peer := newTestInbox(t, fx.peer(t), inbox.Config{})
			wg.Go(func() {
				for r := range rounds {
					// Overlapping windows of the keys, in random order.
					var batch []string
					for k := (w*7 + r*5) % keys; len(batch) < 20; k = (k + 1) % keys {
						batch = append(batch, fmt.Sprint("race-", k))
					}
					rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
					for {
						_, _, err := creditBatch(ctx, peer, fx.ledger, "billing", items(batch...), 1)
						if !errors.Is(err, inbox.ErrContended) { // a deadlock or a bound wait: retryable
							errs <- err
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
		// Then every key once more: all duplicates.
		var all []string
		for k := range keys {
			all = append(all, fmt.Sprint("race-", k))
		}
		covered := 0
		_, res, err := creditBatch(ctx, newTestInbox(t, fx.peer(t), inbox.Config{}), fx.ledger, "billing", items(all...), 1)
		require.NoError(t, err)
		for _, dup := range res.Duplicate {
			if dup {
				covered++
			}
		}
		total, credits := fx.ledger.balance(t)
		require.Equal(t, keys, total, "every message applied exactly once")
		require.Equal(t, keys, credits)
		require.Equal(t, keys, covered+res.Processed)
	})

	t.Run("BatchWithoutAKeyIsRefused", func(t *testing.T) {
		fx, ib := setup(t)
		calls := 0
		_, err := ib.ProcessBatch(ctx, "billing", items("a", "", "c"), func(context.Context, []int) error { calls++; return nil })
		var itemErr *inbox.BatchItemError
		require.ErrorAs(t, err, &itemErr)
		require.Equal(t, 1, itemErr.Index)
		require.ErrorIs(t, err, inbox.ErrNoKey)
		require.Zero(t, calls)
		type msg struct{ id string }
		_, err = inbox.ProcessBatchOf(ctx, ib, "billing", []msg{{"a"}, {"b"}, {""}}, func(m msg) (inbox.Item, error) { return inbox.Item{Key: m.id}, nil },
			func(context.Context, []msg) error { calls++; return nil })
		require.ErrorAs(t, err, &itemErr)
		require.Equal(t, 2, itemErr.Index)
		require.ErrorIs(t, err, inbox.ErrNoKey)
		require.Zero(t, calls)
		got, _, err := creditBatch(ctx, ib, fx.ledger, "billing", items("a", "c"), 1)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, got, "nothing of the refused batches was claimed")
	})

	t.Run("BatchFingerprints", func(t *testing.T) {
		fx, _ := setup(t)
		fail := newTestInbox(t, fx.store, inbox.Config{OnMismatch: inbox.Fail})
		replay := newTestInbox(t, fx.store, inbox.Config{})
		_, err := fail.ProcessBatch(ctx, "billing", []inbox.Item{{Key: "fp-1", Fingerprint: []byte("one")}, {Key: "fp-2"}}, func(context.Context, []int) error { return nil })
		require.NoError(t, err)

		for _, batch := range [][]inbox.Item{
			{{Key: "fp-new"}, {Key: "fp-1", Fingerprint: []byte("two")}},                                          // stored fingerprint differs
			{{Key: "fp-new", Fingerprint: []byte("a")}, {Key: "fp-new", Fingerprint: []byte("b")}, {Key: "fp-2"}}, // differs within the batch
		} {
			calls := 0
			_, err = fail.ProcessBatch(ctx, "billing", batch, func(context.Context, []int) error { calls++; return nil })
			var itemErr *inbox.BatchItemError
			require.ErrorAs(t, err, &itemErr)
			require.Equal(t, 1, itemErr.Index)
			require.ErrorIs(t, err, inbox.ErrFingerprintMismatch)
			require.ErrorIs(t, err, inbox.ErrDuplicate)
			require.Zero(t, calls, "refused before anything is processed")
		}
		// With Replay it is a duplicate, and the rest is processed.
		got, res, err := creditBatch(ctx, replay, fx.ledger, "billing", []inbox.Item{{Key: "fp-new"}, {Key: "fp-1", Fingerprint: []byte("two")}, {Key: "fp-2", Fingerprint: []byte("x")}}, 1)
		require.NoError(t, err)
		require.Equal(t, []int{0}, got)
		require.Equal(t, []bool{false, true, true}, res.Duplicate, "no stored fingerprint (fp-2): never compared")
		// The fingerprint stored by a batch is the one a single claim compares.
		claim, err := fx.store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "fp-1"})
		require.NoError(t, err)
		require.True(t, claim.Duplicate)
		require.Equal(t, []byte("one"), claim.Fingerprint)
	})

	t.Run("BatchJoinsTransactionFromContext", func(t *testing.T) {
		if f.caps.noJoin {
			t.Skip("the store has no transaction of the caller's to join")
		}
		fx, ib := setup(t)
		for _, commit := range []bool{false, true} {
			begin := fx.begin
			if !commit {
				begin = fx.beginOther // from another handle to the same database
			}
			tx, end := begin(t)
			got, _, err := creditBatch(inbox.ContextWithTx(ctx, tx), ib, fx.ledger, "billing", items("j-1", "j-2"), 5)
			require.NoError(t, err)
			require.Equal(t, []int{0, 1}, got, "the keys are new until a joined transaction commits")
			require.NoError(t, end(commit))
		}
		got, _, err := creditBatch(ctx, ib, fx.ledger, "billing", items("j-1", "j-2", "j-3"), 5)
		require.NoError(t, err)
		require.Equal(t, []int{2}, got)
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 15, total)
	})

	t.Run("BatchLockTimeoutBoundsTheWait", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{lockTimeout: 500 * time.Millisecond})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		h := holdClaim(t, true, func(hold func() error) error {
			_, err := ib.Process(ctx, "billing", "held", func(context.Context) error { return hold() })
			return err
		})
		requireBoundedWait(t, h, func() error {
			_, _, err := creditBatch(ctx, newTestInbox(t, fx.peer(t), inbox.Config{}), fx.ledger, "billing", items("free", "held"), 1)
			return err
		})
		got, _, err := creditBatch(ctx, ib, fx.ledger, "billing", items("free", "held"), 1)
		require.NoError(t, err)
		require.Equal(t, []int{0}, got, "the contended batch claimed nothing")
	})

	t.Run("BatchWithMaxAttemptsIsRefused", func(t *testing.T) {
		fx, _ := setup(t)
		f.skipRefusedAttempts(t, fx.store)
		ib := newTestInbox(t, fx.store, inbox.Config{MaxAttempts: 3})
		_, err := ib.ProcessBatch(ctx, "billing", items("a"), func(context.Context, []int) error { return nil })
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.Contains(t, err.Error(), "MaxAttempts")
	})

	t.Run("BatchCancelledContextRollsBack", func(t *testing.T) {
		fx, ib := setup(t)
		cctx, cancel := context.WithCancel(ctx)
		_, err := ib.ProcessBatch(cctx, "billing", items("c-1", "c-2"), func(txCtx context.Context, fresh []int) error {
			require.NoError(t, fx.ledger.credit(txCtx, 1))
			cancel()
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		_, err = ib.ProcessBatch(cctx, "billing", items("c-1"), func(context.Context, []int) error { return nil })
		require.ErrorIs(t, err, context.Canceled, "nothing is sent on a context that ended")
		total, _ := fx.ledger.balance(t)
		require.Zero(t, total, "nothing half-written")
		got, _, err := creditBatch(ctx, ib, fx.ledger, "billing", items("c-1", "c-2"), 1)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, got)
	})

	t.Run("BatchLongAndBinaryKeys", func(t *testing.T) {
		fx, ib := setup(t)
		long := strings.Repeat("k", 10_000)
		batch := items(long, long+"x", strings.Repeat("é", 200), "a\x00b", "\xff\xfe", "'); DROP TABLE x; --", `\`, "Order-8", "order-8")
		got, _, err := creditBatch(ctx, ib, fx.ledger, "billing", batch, 1)
		require.NoError(t, err)
		require.Len(t, got, len(batch))
		for i, it := range batch {
			dup, err := creditOnce(ctx, ib, fx.ledger, "billing", it.Key, 1)
			require.NoError(t, err)
			require.True(t, dup, "key %d is stored as a single claim finds it", i)
		}
		total, _ := fx.ledger.balance(t)
		require.Equal(t, len(batch), total)
	})
}
