package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// Issue 19, defect 9 and the suspected observer items: one meaning per outcome, whatever
// the entry point (Middleware, Process, ProcessResult).

// TestOutcomes_ReplayedMeansSomethingCameBack: a duplicate is "replayed" when stored
// output was given back, and "duplicate" when there was none to give.
func TestOutcomes_ReplayedMeansSomethingCameBack(t *testing.T) {
	obs := &observations{}
	ib, l := pgxSetup(t, inbox.Config{Observer: obs})
	ctx := context.Background()
	var calls atomic.Int32
	steps := []struct {
		name string
		run  func() error
		want inbox.Outcome
	}{
		{"middleware, messages produced", func() error {
			_, err := ib.Middleware(crediting(l, &calls, message.NewMessage("receipt-1", nil)))(message.NewMessage("order-1", nil))
			return err
		}, inbox.OutcomeReplayed},
		{"middleware, nothing produced", func() error {
			_, err := ib.Middleware(crediting(l, &calls))(message.NewMessage("order-2", nil))
			return err
		}, inbox.OutcomeDuplicate},
		{"ProcessResult, a result", func() error {
			_, err := ib.ProcessResult(ctx, "billing", "order-3", nil, func(context.Context) ([]byte, error) { return []byte("ok"), nil })
			return err
		}, inbox.OutcomeReplayed},
		{"ProcessResult, an empty result", func() error {
			_, err := ib.ProcessResult(ctx, "billing", "order-4", nil, func(context.Context) ([]byte, error) { return nil, nil })
			return err
		}, inbox.OutcomeDuplicate},
		{"Process", func() error {
			_, err := ib.Process(ctx, "billing", "order-5", func(context.Context) error { return nil })
			return err
		}, inbox.OutcomeDuplicate},
	}
	for _, s := range steps {
		require.NoError(t, s.run(), s.name)
		require.Equal(t, inbox.OutcomeProcessed, obs.one(t).o.Outcome, s.name)
		require.NoError(t, s.run(), s.name)
		require.Equal(t, s.want, obs.one(t).o.Outcome, "%s: the redelivery", s.name)
	}
}

// A fingerprint function that fails is a failure, not a message without a key.
func TestOutcomes_FingerprintFailureIsAFailure(t *testing.T) {
	obs := &observations{}
	boom := errors.New("payload is not JSON")
	ib, l := pgxSetup(t, inbox.Config{Observer: obs, Fingerprint: func(*message.Message) ([]byte, error) { return nil, boom }})
	var calls atomic.Int32
	msg := message.NewMessage("order-1", nil)
	_, err := ib.Middleware(crediting(l, &calls))(msg)
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, inbox.ErrNoKey)
	got := obs.one(t)
	require.Equal(t, inbox.OutcomeFailed, got.o.Outcome)
	require.Equal(t, "order-1", got.o.Key, "the key was derived")
	require.ErrorIs(t, got.o.Err, boom)
	require.Equal(t, string(inbox.OutcomeFailed), msg.Metadata.Get(inbox.MetadataOutcome))
	require.Zero(t, calls.Load())
}

// A caller that bounds the wait on a key itself (inboxhttp's InFlightWait) cancels the
// context with a cause that wraps ErrContended: the claim it stops is contended, not
// failed, and so is a handler that gives up for that reason.
func TestOutcomes_CallerBoundedWaitIsContended(t *testing.T) {
	t.Parallel()
	obs := &observations{}
	pool := pgPool(t)
	table := tableName("contended")
	ib := newTestInbox(t, newPgxStore(t, pool, inbox.PostgresConfig{Table: table}), inbox.Config{Observer: obs})
	ctx := context.Background()
	holding, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error {
			close(holding)
			<-release
			return nil
		})
		done <- err
	}()
	<-holding
	obs.take()
	waitCtx, cancel := context.WithCancelCause(ctx)
	go func() {
		// Cancel once the claim waits: PostgreSQL shows it waiting on the key's lock.
		waitForLockWait(t, pool, table)
		cancel(fmt.Errorf("waited too long for the key: %w", inbox.ErrContended))
	}()
	_, err := ib.Process(waitCtx, "billing", "order-1", func(context.Context) error { return nil })
	close(release)
	require.NoError(t, <-done)
	require.ErrorIs(t, err, inbox.ErrContended)
	require.False(t, inbox.Permanent(err))
	got := obs.take()
	require.Len(t, got, 2) // the first delivery's, and the bounded one's
	var bounded inbox.Observation
	for _, o := range got {
		if o.o.Outcome != inbox.OutcomeProcessed {
			bounded = o.o
		}
	}
	require.Equal(t, inbox.OutcomeContended, bounded.Outcome)
	require.ErrorIs(t, bounded.Err, inbox.ErrContended)

	_, err = ib.Process(ctx, "billing", "order-2", func(context.Context) error {
		return fmt.Errorf("gave up: %w", inbox.ErrContended)
	})
	require.ErrorIs(t, err, inbox.ErrContended)
	require.Equal(t, inbox.OutcomeContended, obs.one(t).o.Outcome)
}

// waitForLockWait returns once a PostgreSQL session waits on a lock in a statement that
// names table.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool, table string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, table).Scan(&n)
		if err != nil || n > 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
