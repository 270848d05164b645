package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
)

// The purge turn (inbox.PurgeTurns, which inbox.Retention takes before each run): one
// holder at a time per table, its batches on its own session, gone with that session.

func exercisePurgeTurns(t *testing.T, f storeFlavour) {
	ctx := f.context()
	future := func() time.Time { return time.Now().Add(time.Minute) }

	// turns returns fx's store as PurgeTurns, and credits n keys of "billing".
	turns := func(t *testing.T, fx fixture, n int) inbox.PurgeTurns {
		t.Helper()
		pt, ok := fx.store.(inbox.PurgeTurns)
		require.True(t, ok, "%T has no purge turns: implement inbox.PurgeTurns (internal/contract)", fx.store)
		ib := newTestInbox(t, fx.store, inbox.Config{})
		for i := range n {
			_, err := creditOnce(ctx, ib, fx.ledger, "billing", fmt.Sprint("turn-", i), 1)
			require.NoError(t, err)
		}
		return pt
	}

	t.Run("PurgeTurnOneHolderAtATime", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		pt := turns(t, fx, 5)
		if f.caps.purgeTurnRefused != nil {
			turn, err := pt.TakePurgeTurn(ctx, time.Second)
			require.ErrorIs(t, err, f.caps.purgeTurnRefused)
			require.Nil(t, turn)
			require.Contains(t, err.Error(), "retention", "the error says what to give the retention instead")
			return
		}
		turn, err := pt.TakePurgeTurn(ctx, time.Second)
		require.NoError(t, err)
		require.NotNil(t, turn)
		peer := fx.peer(t).(inbox.PurgeTurns)
		other, err := peer.TakePurgeTurn(ctx, time.Second)
		require.NoError(t, err)
		if f.caps.noPurge {
			require.NotNil(t, other, "keys that expire by themselves leave nothing to take turns at: every caller gets one")
			n, err := other.PurgeBatch(ctx, future(), 10)
			require.NoError(t, err)
			require.Zero(t, n)
			require.NoError(t, errorsOf(turn.Release(ctx), other.Release(ctx)))
			return
		}
		require.Nil(t, other, "a second turn while the first is held")
		n, err := turn.PurgeBatch(ctx, future(), 3)
		require.NoError(t, err)
		require.EqualValues(t, 3, n.Keys)
		n, err = turn.PurgeBatch(ctx, future(), 3)
		require.NoError(t, err)
		require.EqualValues(t, 2, n.Keys)
		require.NoError(t, turn.Release(ctx))
		require.NoError(t, turn.Release(ctx), "a second Release does nothing")

		other, err = peer.TakePurgeTurn(ctx, time.Second)
		require.NoError(t, err)
		require.NotNil(t, other, "the turn, released, is free for the next holder")
		again, err := pt.TakePurgeTurn(ctx, time.Second)
		require.NoError(t, err)
		require.Nil(t, again, "held by the peer now")
		require.NoError(t, other.Release(ctx))
		stats, err := fx.store.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, stats, "the turn's batches deleted every key")
	})

	t.Run("CountPurgeCountsWhatAPurgeWouldDelete", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		turns(t, fx, 5)
		pc, ok := fx.store.(inbox.PurgeCounter)
		require.True(t, ok, "%T cannot count a purge: implement inbox.PurgeCounter (internal/contract)", fx.store)
		n, err := pc.CountPurge(ctx, time.Now().Add(-time.Hour))
		require.NoError(t, err)
		require.Zero(t, n, "nothing is older than an hour")
		n, err = pc.CountPurge(ctx, future())
		require.NoError(t, err)
		if f.caps.noPurge {
			require.Zero(t, n, "keys that expire by themselves: a purge deletes nothing")
			return
		}
		require.EqualValues(t, 5, n.Keys)
		stats, err := fx.store.Stats(ctx)
		require.NoError(t, err)
		require.Len(t, stats, 1, "counting deleted nothing")
		purged, err := fx.store.PurgeBatch(ctx, future(), 100)
		require.NoError(t, err)
		require.Equal(t, n, purged, "the purge deleted what was counted")
	})

	t.Run("RetentionSkipsAHeldTurn", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		pt := turns(t, fx, 4)
		var mu sync.Mutex
		var seen []inbox.RetentionRun
		r, err := inbox.NewRetention(inbox.RetentionConfig{Store: fx.store, Name: "conformance",
			Purge: inbox.PurgeConfig{OlderThan: time.Nanosecond, Force: true, BatchSize: 3},
			Observer: inbox.RetentionObserverFunc(func(_ context.Context, run inbox.RetentionRun) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, run)
			})})
		require.NoError(t, err)
		time.Sleep(time.Millisecond) // the keys are older than OlderThan
		if f.caps.purgeTurnRefused != nil {
			runs, err := r.Purge(ctx)
			require.ErrorIs(t, err, f.caps.purgeTurnRefused)
			require.Len(t, runs, 1)
			require.False(t, runs[0].Turn)
			require.ErrorIs(t, runs[0].Err, f.caps.purgeTurnRefused)
			return
		}
		held, err := pt.TakePurgeTurn(ctx, time.Second)
		require.NoError(t, err)
		require.NotNil(t, held)
		runs, err := r.Purge(ctx)
		require.NoError(t, err, "a turn held elsewhere is no failure")
		require.Len(t, runs, 1)
		if !f.caps.noPurge {
			require.False(t, runs[0].Turn, "another holder has the turn: the run skips")
			require.Zero(t, runs[0].Keys)
		}
		require.NoError(t, held.Release(ctx))

		runs, err = r.Purge(ctx)
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.True(t, runs[0].Turn)
		want := int64(4)
		if f.caps.noPurge {
			want = 0
		}
		require.Equal(t, want, runs[0].Keys)
		require.Equal(t, "conformance", runs[0].Name)
		require.Equal(t, f.tenant, runs[0].Tenant)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seen, 2, "the observer gets every run")
		require.Equal(t, runs[0], seen[1])
	})

	t.Run("PurgeTurnLostWithItsConnection", func(t *testing.T) {
		switch {
		case f.caps.noNetwork:
			t.Skip("the store has no network connection to break")
		case f.caps.noPurge:
			t.Skip("the store purges nothing: its turns exclude nothing")
		case f.caps.purgeTurnRefused != nil:
			t.Skip("the store refuses purge turns (PurgeTurnOneHolderAtATime checks the refusal)")
		}
		t.Parallel()
		fx := f.open(t, storeOpts{faults: true})
		step, ok := fx.faults.steps[stepPurge]
		require.True(t, ok, "the flavour declares no purge step (flavours_faults_test.go)")
		pt := turns(t, fx, 5)
		turn, err := pt.TakePurgeTurn(ctx, time.Second)
		require.NoError(t, err)
		require.NotNil(t, turn)
		fault := fx.faults.inj.Arm(step, netfault.AfterReply)
		_, err = turn.PurgeBatch(ctx, future(), 2)
		require.Error(t, err, "the batch's connection broke after the server ran it")
		require.True(t, fault.HasFired())
		_, err = turn.PurgeBatch(ctx, future(), 2)
		require.Error(t, err, "a turn whose session is lost deletes nothing more")

		peer := fx.peer(t).(inbox.PurgeTurns)
		var next inbox.PurgeTurn
		require.Eventually(t, func() bool {
			next, err = peer.TakePurgeTurn(ctx, time.Second)
			require.NoError(t, err)
			return next != nil
		}, 30*time.Second, 50*time.Millisecond, "the server frees a lost session's turn")
		for {
			n, err := next.PurgeBatch(ctx, future(), 2)
			require.NoError(t, err)
			if n.Keys == 0 {
				break
			}
		}
		require.NoError(t, next.Release(ctx))
		require.NoError(t, turn.Release(ctx), "releasing a lost turn does nothing")
		stats, err := fx.store.Stats(ctx)
		require.NoError(t, err)
		require.Empty(t, stats, "the next holder purged what the lost one left")
		require.NoError(t, fx.faults.inj.Err())
	})
}

// errorsOf returns the first non-nil error.
func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
