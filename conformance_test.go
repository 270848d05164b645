package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The conformance suite: every store passes the same cases, on its real database.

func TestStoreConformance(t *testing.T) {
	t.Parallel()
	for _, f := range storeFlavours() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			exerciseStore(t, f)
		})
	}
}

// newTestInbox returns an Inbox over fx's store, for a consumer named in tests.
func newTestInbox(t *testing.T, store inbox.Store, cfg inbox.Config) *inbox.Inbox {
	t.Helper()
	cfg.Store = store
	if cfg.Consumer == "" {
		cfg.Consumer = "billing"
	}
	ib, err := inbox.New(cfg)
	require.NoError(t, err)
	return ib
}

// creditOnce processes key for consumer with a handler that credits amount.
func creditOnce(ctx context.Context, ib *inbox.Inbox, l ledger, consumer, key string, amount int) (bool, error) {
	return ib.Process(ctx, consumer, key, func(ctx context.Context) error { return l.credit(ctx, amount) })
}

// purgeEverything purges every key of store, in batches, until none is left.
func purgeEverything(ctx context.Context, t *testing.T, store inbox.Store) {
	t.Helper()
	for {
		n, err := store.PurgeBatch(ctx, time.Now().Add(time.Minute), 100)
		require.NoError(t, err)
		if n.Keys == 0 {
			return
		}
	}
}

// exerciseStore runs the conformance suite against one store flavour.
func exerciseStore(t *testing.T, f storeFlavour) {
	ctx := f.context()

	setup := func(t *testing.T) (fixture, *inbox.Inbox) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		return fx, newTestInbox(t, fx.store, inbox.Config{})
	}

	t.Run("FirstDeliveryThenDuplicate", func(t *testing.T) {
		fx, ib := setup(t)
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-1", 190)
		require.NoError(t, err)
		require.False(t, dup)
		calls := 0
		dup, err = ib.Process(ctx, "billing", "order-1", func(context.Context) error { calls++; return nil })
		require.NoError(t, err)
		require.True(t, dup)
		require.Zero(t, calls, "a duplicate must not reach the handler")
		total, credits := fx.ledger.balance(t)
		require.Equal(t, [2]int{190, 1}, [2]int{total, credits})
	})

	t.Run("ErrorRollsBackKeyAndWrites", func(t *testing.T) {
		fx, ib := setup(t)
		boom := errors.New("provider timed out")
		dup, err := ib.Process(ctx, "billing", "order-2", func(ctx context.Context) error {
			require.NoError(t, fx.ledger.credit(ctx, 190))
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.False(t, dup)
		total, _ := fx.ledger.balance(t)
		require.Zero(t, total, "a failed handler's writes must roll back")

		dup, err = creditOnce(ctx, ib, fx.ledger, "billing", "order-2", 190)
		require.NoError(t, err)
		require.False(t, dup, "the redelivery of a failed message must be processed")
		total, _ = fx.ledger.balance(t)
		require.Equal(t, 190, total)
	})

	t.Run("PanicRollsBackKeyAndWrites", func(t *testing.T) {
		fx, ib := setup(t)
		func() {
			defer func() { require.Equal(t, "handler bug", recover()) }()
			_, _ = ib.Process(ctx, "billing", "order-3", func(ctx context.Context) error {
				require.NoError(t, fx.ledger.credit(ctx, 190))
				panic("handler bug")
			})
		}()
		total, _ := fx.ledger.balance(t)
		require.Zero(t, total)
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-3", 190)
		require.NoError(t, err)
		require.False(t, dup)
	})

	t.Run("KeysArePerConsumer", func(t *testing.T) {
		fx, ib := setup(t)
		for _, consumer := range []string{"billing", "notifications", "billing"} {
			_, err := creditOnce(ctx, ib, fx.ledger, consumer, "order-4", 1)
			require.NoError(t, err)
		}
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 2, total, "each consumer processes the message once")
	})

	for _, firstCommits := range []bool{true, false} {
		name := "ConcurrentDuplicateWaitsThenSkips"
		if !firstCommits {
			name = "ConcurrentDuplicateWaitsThenProcesses"
		}
		t.Run(name, func(t *testing.T) {
			fx, ib := setup(t)
			h := holdCredit(ctx, t, ib, fx.ledger, "order-5", 190, firstCommits)
			peer := newTestInbox(t, fx.peer(t), inbox.Config{})
			second, err := raceHeld(t, h, "the second delivery must wait for the first's transaction", func() (bool, error) {
				return creditOnce(ctx, peer, fx.ledger, "billing", "order-5", 190)
			})
			v := second[0]
			require.NoError(t, v.err)
			if firstCommits {
				require.NoError(t, err)
				require.True(t, v.got, "the first committed: the second is a duplicate")
			} else {
				require.Error(t, err)
				require.False(t, v.got, "the first rolled back: the second processes")
			}
			total, credits := fx.ledger.balance(t)
			require.Equal(t, [2]int{190, 1}, [2]int{total, credits})
		})
	}

	t.Run("ThreeWayRaceAppliesOnce", func(t *testing.T) {
		fx, ib := setup(t)
		h := holdClaim(t, false, func(hold func() error) error {
			_, err := ib.Process(ctx, "billing", "order-6", func(context.Context) error { return hold() })
			return err
		})
		rivals := make([]func() (bool, error), 2)
		for i := range rivals {
			peer := newTestInbox(t, fx.peer(t), inbox.Config{})
			rivals[i] = func() (bool, error) { return creditOnce(ctx, peer, fx.ledger, "billing", "order-6", 190) }
		}
		others, err := raceHeld(t, h, "", rivals...)
		require.Error(t, err)
		// InnoDB may answer one waiter with a deadlock: retryable, never a silent ack.
		for _, o := range others {
			if o.err != nil {
				require.ErrorIs(t, o.err, inbox.ErrContended)
				_, err = creditOnce(ctx, ib, fx.ledger, "billing", "order-6", 190)
				require.NoError(t, err)
			}
		}
		total, credits := fx.ledger.balance(t)
		require.Equal(t, [2]int{190, 1}, [2]int{total, credits})
	})

	t.Run("StoredOutputIsReplayed", func(t *testing.T) {
		fx, ib := setup(t)
		handler := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if err := fx.ledger.credit(msg.Context(), 190); err != nil {
				return nil, err
			}
			out := message.NewMessage("cashback-1", []byte(`{"amount":"1.90"}`))
			out.Metadata.Set("type", "CashbackCredited")
			return []*message.Message{out, message.NewMessage("receipt-1", []byte{0, 1, 2})}, nil
		})
		first, err := handler(f.message("order-7", []byte(`{}`)))
		require.NoError(t, err)
		again, err := handler(f.message("order-7", []byte(`{}`)))
		require.NoError(t, err)
		require.Len(t, again, 2)
		for i := range first {
			require.Equal(t, first[i].UUID, again[i].UUID)
			require.Equal(t, first[i].Payload, again[i].Payload)
			require.Equal(t, first[i].Metadata, again[i].Metadata)
		}
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 190, total)
	})

	t.Run("LongKeys", func(t *testing.T) {
		fx, ib := setup(t)
		long := strings.Repeat("k", 10_000)
		for _, key := range []string{long, long, long + "x", strings.Repeat("é", 200), "a\x00b", "\xff\xfe"} {
			_, err := creditOnce(ctx, ib, fx.ledger, "billing", key, 1)
			require.NoError(t, err)
		}
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 5, total)
	})

	t.Run("KeysCompareAsBytes", func(t *testing.T) {
		fx, ib := setup(t)
		for _, key := range []string{"Order-8", "order-8", "order-8 ", "order-8  ", "ORDER-8"} {
			dup, err := creditOnce(ctx, ib, fx.ledger, "billing", key, 1)
			require.NoError(t, err)
			require.False(t, dup, "key %q", key)
		}
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 5, total)
	})

	t.Run("FingerprintIsStored", func(t *testing.T) {
		fx, _ := setup(t)
		rec := inbox.Record{Consumer: "billing", Key: "order-9", Fingerprint: []byte("fp-1")}
		claim, err := fx.store.Claim(ctx, rec)
		require.NoError(t, err)
		require.False(t, claim.Duplicate)
		require.NoError(t, claim.Tx.Commit(ctx, []byte(`[]`)))
		claim, err = fx.store.Claim(ctx, rec)
		require.NoError(t, err)
		require.True(t, claim.Duplicate)
		require.Nil(t, claim.Tx)
		require.Equal(t, []byte("fp-1"), claim.Fingerprint)
		require.Equal(t, []byte(`[]`), claim.Output)
	})

	t.Run("JoinsTransactionFromContext", func(t *testing.T) {
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
			txCtx := inbox.ContextWithTx(ctx, tx)
			dup, err := creditOnce(txCtx, ib, fx.ledger, "billing", "order-10", 190)
			require.NoError(t, err)
			require.False(t, dup, "the key is new until a joined transaction commits")
			require.NoError(t, end(commit))
		}
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-10", 190)
		require.NoError(t, err)
		require.True(t, dup)
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 190, total)
	})

	t.Run("HandlerEndingTheTxIsAnError", func(t *testing.T) {
		fx, ib := setup(t)
		_, err := ib.Process(ctx, "billing", "order-11", func(ctx context.Context) error {
			return endTx(t, ctx)
		})
		require.ErrorIs(t, err, inbox.ErrTxDone)
		// The handler's commit took the key with it: the redelivery is a duplicate. A
		// store whose handle cannot commit stored nothing: the redelivery processes.
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-11", 190)
		require.NoError(t, err)
		require.Equal(t, !f.caps.handlerCannotCommit, dup)
	})

	t.Run("CancelledContextRollsBack", func(t *testing.T) {
		fx, ib := setup(t)
		cctx, cancel := context.WithCancel(ctx)
		_, err := ib.Process(cctx, "billing", "order-12", func(txCtx context.Context) error {
			require.NoError(t, fx.ledger.credit(txCtx, 190))
			cancel()
			return nil
		})
		require.Error(t, err)
		total, _ := fx.ledger.balance(t)
		require.Zero(t, total, "nothing half-written")
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-12", 190)
		require.NoError(t, err)
		require.False(t, dup)
	})

	t.Run("LockTimeoutBoundsTheWait", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{lockTimeout: 500 * time.Millisecond})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		h := holdClaim(t, true, func(hold func() error) error {
			_, err := ib.Process(ctx, "billing", "order-13", func(context.Context) error { return hold() })
			return err
		})
		requireBoundedWait(t, h, func() error {
			_, err := creditOnce(ctx, newTestInbox(t, fx.peer(t), inbox.Config{}), fx.ledger, "billing", "order-13", 190)
			return err
		})
		total, _ := fx.ledger.balance(t)
		require.Zero(t, total)
	})

	t.Run("AttemptsCountCrashes", func(t *testing.T) {
		fx, _ := setup(t)
		f.skipRefusedAttempts(t, fx.store)
		for want := range 3 {
			require.Equal(t, want, crashedAttempt(t, f.context(), fx.store, "billing", "order-14"))
		}
		claim, err := fx.store.Claim(ctx, attemptOf("billing", "order-14"))
		require.NoError(t, err)
		require.Equal(t, 3, claim.Unfinished)
		require.NoError(t, claim.Tx.Rollback(ctx), "a clean failure")
		claim, err = fx.store.Claim(ctx, attemptOf("billing", "order-14"))
		require.NoError(t, err)
		require.Equal(t, 3, claim.Unfinished, "3 crashed, 1 ended cleanly")
		require.NoError(t, claim.Tx.Commit(ctx, nil))
		claim, err = fx.store.Claim(ctx, attemptOf("billing", "order-14"))
		require.NoError(t, err)
		require.True(t, claim.Duplicate)
		require.Zero(t, claim.Unfinished, "a duplicate counts nothing")
		// EndAttempt is safe for an attempt that ended, and one that never started.
		rec := attemptOf("billing", "order-14")
		require.NoError(t, fx.store.EndAttempt(ctx, rec))
		require.NoError(t, fx.store.EndAttempt(ctx, rec))
	})

	t.Run("ForgetMakesTheKeyNewAgain", func(t *testing.T) {
		fx, ib := setup(t)
		_, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-15", 1)
		require.NoError(t, err)
		found, err := fx.store.Forget(ctx, "billing", "order-15")
		require.NoError(t, err)
		require.True(t, found)
		found, err = fx.store.Forget(ctx, "billing", "order-15")
		require.NoError(t, err)
		require.False(t, found)
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-15", 1)
		require.NoError(t, err)
		require.False(t, dup)
	})

	// The inbox remembers the keys it committed (Config.RecentKeys) and reads their
	// stored row before claiming them again: a key forgotten or purged since, by this
	// process or another, must be processed again, never answered from memory.
	t.Run("RememberedKeyForgottenOrPurgedRunsAgain", func(t *testing.T) {
		fx, ib := setup(t)
		for range 2 { // the second delivery is answered from the read of the row
			_, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-22", 1)
			require.NoError(t, err)
		}
		found, err := fx.store.Forget(ctx, "billing", "order-22")
		require.NoError(t, err)
		require.True(t, found)
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-22", 1)
		require.NoError(t, err)
		require.False(t, dup, "a forgotten key is new again, remembered or not")
		dup, err = creditOnce(ctx, ib, fx.ledger, "billing", "order-22", 1)
		require.NoError(t, err)
		require.True(t, dup)
		if !f.caps.noPurge {
			purgeEverything(ctx, t, fx.store)
			dup, err = creditOnce(ctx, ib, fx.ledger, "billing", "order-22", 1)
			require.NoError(t, err)
			require.False(t, dup, "a purged key is new again, remembered or not")
		}
		total, credits := fx.ledger.balance(t)
		want := 2
		if !f.caps.noPurge {
			want = 3
		}
		require.Equal(t, [2]int{want, want}, [2]int{total, credits})
	})

	// A delivery hinted as a replay (ContextWithReplayHint) is read before it is claimed,
	// on an inbox that never saw its key (another process: RecentKeys off). The hint never
	// answers: a new, forgotten or purged key is processed, a committed one is a
	// duplicate, and one still in flight is waited for, then processed if its first
	// delivery rolled back; with an ended context or in a joined transaction it changes
	// nothing.
	t.Run("ReplayHintNeverAnswers", func(t *testing.T) {
		fx, ib := setup(t)
		hinted := inbox.ContextWithReplayHint(ctx)
		other := newTestInbox(t, fx.store, inbox.Config{RecentKeys: -1})
		want := 0
		credit := func(key string, wantDup bool, why string) {
			t.Helper()
			dup, err := creditOnce(hinted, other, fx.ledger, "billing", key, 1)
			require.NoError(t, err)
			require.Equal(t, wantDup, dup, why)
			if !dup {
				want++
			}
		}
		credit("order-23", false, "a new key hinted as a replay is processed")
		credit("order-23", true, "hinted and committed: a duplicate")
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-24", 1)
		require.NoError(t, err)
		require.False(t, dup)
		want++
		credit("order-24", true, "committed by another inbox: a duplicate")
		found, err := fx.store.Forget(ctx, "billing", "order-24")
		require.NoError(t, err)
		require.True(t, found)
		credit("order-24", false, "a forgotten key is new again, hinted or not")
		credit("order-24", true, "processed again, then a duplicate")

		// A delivery whose context ended fails and processes nothing, and the handle (a
		// single connection on the -conn flavours) answers the next one.
		ended, cancel := context.WithCancel(hinted)
		cancel()
		_, err = creditOnce(ended, other, fx.ledger, "billing", "order-24", 1)
		require.ErrorIs(t, err, context.Canceled)
		credit("order-24", true, "after a delivery whose context had ended")

		// In a transaction the inbox joins, from another handle, the hint changes nothing:
		// the key is claimed in the owner's transaction.
		if !f.caps.noJoin {
			tx, end := fx.beginOther(t)
			dup, err := creditOnce(inbox.ContextWithTx(hinted, tx), other, fx.ledger, "billing", "order-26", 1)
			require.NoError(t, err)
			require.False(t, dup, "a new key in a joined transaction, hinted")
			require.NoError(t, end(true))
			want++
			credit("order-26", true, "the owner committed")
		}
		if !f.caps.noPurge {
			purgeEverything(ctx, t, fx.store)
			credit("order-23", false, "a purged key is new again, hinted or not")
		}

		// In flight: no committed row to read, so the hinted rival claims and waits.
		h := holdCredit(ctx, t, ib, fx.ledger, "order-25", 1, false)
		peer := newTestInbox(t, fx.peer(t), inbox.Config{RecentKeys: -1})
		rival, err := raceHeld(t, h, "a hinted delivery must wait for the first's transaction", func() (bool, error) {
			return creditOnce(hinted, peer, fx.ledger, "billing", "order-25", 1)
		})
		require.Error(t, err, "the first rolled back")
		require.NoError(t, rival[0].err)
		require.False(t, rival[0].got, "the first rolled back: the hinted rival processes")
		want++
		total, credits := fx.ledger.balance(t)
		require.Equal(t, [2]int{want, want}, [2]int{total, credits})
	})

	t.Run("PurgeBatchAndStats", func(t *testing.T) {
		fx, ib := setup(t)
		for i := range 5 {
			_, err := creditOnce(ctx, ib, fx.ledger, "billing", fmt.Sprint("order-16-", i), 1)
			require.NoError(t, err)
		}
		_, err := creditOnce(ctx, ib, fx.ledger, "notifications", "order-16-0", 1)
		require.NoError(t, err)
		stats, err := fx.store.Stats(ctx)
		require.NoError(t, err)
		require.Len(t, stats, 2)
		require.Equal(t, "billing", stats[0].Consumer)
		require.EqualValues(t, 5, stats[0].Keys)
		require.WithinDuration(t, time.Now(), stats[0].Oldest, time.Minute)

		n, err := fx.store.PurgeBatch(ctx, time.Now().Add(-time.Hour), 100)
		require.NoError(t, err)
		require.Zero(t, n.Keys, "nothing is older than an hour")
		if f.caps.noPurge {
			n, err := fx.store.PurgeBatch(ctx, time.Now().Add(time.Minute), 4)
			require.NoError(t, err)
			require.Zero(t, n, "a store whose keys expire by themselves purges nothing")
			dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-16-0", 1)
			require.NoError(t, err)
			require.True(t, dup, "the key is still there")
			return
		}
		var purged int64
		for {
			n, err := fx.store.PurgeBatch(ctx, time.Now().Add(time.Minute), 4)
			require.NoError(t, err)
			require.LessOrEqual(t, n.Keys, int64(4))
			if n.Keys == 0 {
				break
			}
			purged += n.Keys
		}
		require.EqualValues(t, 6, purged)
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-16-0", 1)
		require.NoError(t, err)
		require.False(t, dup, "a purged key is new again")
	})

	exerciseCombinations(t, f)
	exerciseAttempts(t, f)
	exerciseFaultAxis(t, f)
	exerciseBatches(t, f)
	exerciseOffsets(t, f)
	exercisePurgeTurns(t, f)
	exerciseSchemaCreation(t, f)
	exerciseTenantSeams(t, f)
	exerciseTenantHTTP(t, f)

	t.Run("MissingTableFailsNew", func(t *testing.T) {
		if f.caps.noSchema {
			t.Skip("the store has no tables to miss")
		}
		t.Parallel()
		_, err := inbox.New(inbox.Config{Store: f.missing(t), Consumer: "billing"})
		require.ErrorIs(t, err, inbox.ErrNoTable)
		require.Contains(t, err.Error(), "schema")
	})
}
