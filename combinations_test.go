package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// exerciseCombinations is the part of the conformance suite where features meet: a
// joined transaction with MaxAttempts and with LockTimeout, from the store's own handle
// and from another one; LockTimeout against the session's own value; purges and
// attempt counts; replay of bytes that are not text.
func exerciseCombinations(t *testing.T, f storeFlavour) {
	ctx := f.context()

	sources := []struct {
		name  string
		begin func(fx fixture) func(t *testing.T) (any, func(bool) error)
		// same: the transaction may run on the store's own connection.
		same bool
	}{
		{"SameHandle", func(fx fixture) func(t *testing.T) (any, func(bool) error) { return fx.begin }, true},
		{"OtherHandle", func(fx fixture) func(t *testing.T) (any, func(bool) error) { return fx.beginOther }, false},
	}

	for _, src := range sources {
		t.Run("JoinedWithMaxAttempts/"+src.name, func(t *testing.T) {
			if f.caps.noJoin {
				t.Skip("the store has no transaction of the caller's to join")
			}
			t.Parallel()
			fx := f.open(t, storeOpts{})
			f.skipRefusedAttempts(t, fx.store)
			ib := newTestInbox(t, fx.store, inbox.Config{MaxAttempts: 2})
			begin := src.begin(fx)
			// Counting beside the joined transaction needs a connection that is not its own.
			refused := fx.handle == oneSQLConn || fx.handle == onePgxConn && src.same || f.caps.oneWriter

			// The handler fails; the owner rolls back: nothing stays, the redelivery processes.
			tx, end := begin(t)
			calls := 0
			boom := errors.New("provider timed out")
			_, err := ib.Process(inbox.ContextWithTx(ctx, tx), "billing", "order-1", func(ctx context.Context) error {
				calls++
				require.NoError(t, fx.ledger.credit(ctx, 190))
				return boom
			})
			if refused {
				require.ErrorIs(t, err, inbox.ErrAttemptsNeedConn)
				require.Zero(t, calls, "refused before the handler")
				require.NoError(t, fx.ledger.credit(inbox.ContextWithTx(ctx, tx), 5), "the owner's transaction is still open")
			} else {
				require.ErrorIs(t, err, boom)
			}
			require.NoError(t, end(false))
			total, _ := fx.ledger.balance(t)
			require.Zero(t, total, "the owner's rollback removes everything")
			dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-1", 190)
			require.NoError(t, err)
			require.False(t, dup, "the redelivery is processed")

			if refused {
				return
			}
			// The handler succeeds and the owner rolls back, more often than MaxAttempts: a
			// healthy message, never refused as poison.
			for range 3 {
				tx, end := begin(t)
				dup, err := creditOnce(inbox.ContextWithTx(ctx, tx), ib, fx.ledger, "billing", "order-2", 1)
				require.NoError(t, err)
				require.False(t, dup)
				require.NoError(t, end(false))
			}
			tx, end = begin(t)
			dup, err = creditOnce(inbox.ContextWithTx(ctx, tx), ib, fx.ledger, "billing", "order-2", 1)
			require.NoError(t, err, "owner rollbacks are not crashes")
			require.False(t, dup)
			require.NoError(t, end(true))
			total, credits := fx.ledger.balance(t)
			require.Equal(t, [2]int{191, 2}, [2]int{total, credits})
		})

		t.Run("JoinedWithLockTimeout/"+src.name, func(t *testing.T) {
			if f.caps.noJoin {
				t.Skip("the store has no transaction of the caller's to join")
			}
			t.Parallel()
			fx := f.open(t, storeOpts{lockTimeout: time.Second})
			ib := newTestInbox(t, fx.store, inbox.Config{})
			begin := src.begin(fx)

			// The owner's own bound is in force in the handler and after the claim.
			tx, end := begin(t)
			require.NoError(t, fx.lock.set(ctx, tx, fx.lock.owned))
			var inHandler string
			_, err := ib.Process(inbox.ContextWithTx(ctx, tx), "billing", "order-1", func(ctx context.Context) error {
				var err error
				inHandler, err = fx.lock.read(ctx, tx)
				return err
			})
			require.NoError(t, err)
			require.Equal(t, fx.lock.owned, inHandler, "the handler runs under the owner's lock bound")
			after, err := fx.lock.read(ctx, tx)
			require.NoError(t, err)
			require.Equal(t, fx.lock.owned, after)
			require.NoError(t, end(true))

			// A joined claim on a key another delivery holds gives up after LockTimeout.
			holding, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				_, err := newTestInbox(t, fx.peer(t), inbox.Config{}).Process(ctx, "billing", "order-2", func(context.Context) error {
					close(holding)
					<-release
					return nil
				})
				done <- err
			}()
			<-holding
			if fx.beginTakesLock {
				// The owner's BEGIN waits for the holder's write lock instead; the claim then
				// finds the key the holder committed.
				var began struct {
					tx  any
					end func(bool) error
				}
				beginDone := make(chan struct{})
				go func() {
					defer close(beginDone)
					began.tx, began.end = begin(t)
				}()
				select {
				case <-beginDone:
					t.Fatal("the owner's BEGIN must wait for the holder's write lock")
				case <-time.After(300 * time.Millisecond):
				}
				close(release)
				require.NoError(t, <-done)
				<-beginDone
				require.NotNil(t, began.end, "the owner's BEGIN failed")
				dup, err := creditOnce(inbox.ContextWithTx(ctx, began.tx), ib, fx.ledger, "billing", "order-2", 190)
				require.NoError(t, err)
				require.True(t, dup)
				require.NoError(t, began.end(false))
				return
			}
			tx, end = begin(t)
			_, err = creditOnce(inbox.ContextWithTx(ctx, tx), ib, fx.ledger, "billing", "order-2", 190)
			close(release)
			require.ErrorIs(t, err, inbox.ErrContended)
			require.NoError(t, end(false))
			require.NoError(t, <-done)
		})
	}

	t.Run("LockTimeoutKeepsTheSessionValue", func(t *testing.T) {
		if f.caps.noSession {
			t.Skip("the store has no database session settings to keep")
		}
		t.Parallel()
		fx := f.open(t, storeOpts{lockTimeout: time.Second})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		read := func(key string) (string, bool) {
			var v string
			dup, err := ib.Process(ctx, "billing", key, func(ctx context.Context) error {
				tx, err := inbox.RequireTx[any](ctx)
				if err == nil {
					v, err = fx.lock.read(ctx, tx)
				}
				return err
			})
			require.NoError(t, err)
			return v, dup
		}
		for _, key := range []string{"order-1", "order-2"} {
			v, dup := read(key)
			require.False(t, dup)
			require.Equal(t, fx.lock.session, v, "the handler runs under the session's own lock bound")
		}
		_, dup := read("order-1")
		require.True(t, dup)
		v, _ := read("order-3")
		require.Equal(t, fx.lock.session, v, "after a duplicate, the session keeps its own bound")
	})

	t.Run("PurgeRemovesEveryOldAttemptRow", func(t *testing.T) {
		if f.caps.noPurge {
			t.Skip("the store's keys and attempt counts expire by themselves")
		}
		t.Parallel()
		fx := f.open(t, storeOpts{})
		f.skipRefusedAttempts(t, fx.store)
		for i := range 5 { // crashed attempts: attempt rows without keys
			crashedAttempt(t, f.context(), fx.store, "billing", fmt.Sprint("crashed-", i))
		}
		time.Sleep(20 * time.Millisecond)
		purged, err := inbox.Purge(ctx, fx.store, inbox.PurgeConfig{OlderThan: time.Millisecond, Force: true, BatchSize: 2})
		require.NoError(t, err)
		require.Zero(t, purged, "no key committed")
		for i := range 5 {
			require.Zero(t, crashedAttempt(t, f.context(), fx.store, "billing", fmt.Sprint("crashed-", i)), "the attempt of crashed-%d was purged", i)
		}
	})

	t.Run("MaxAttemptsAfterPurge", func(t *testing.T) {
		if f.caps.noPurge {
			t.Skip("the store's keys and attempt counts expire by themselves")
		}
		t.Parallel()
		fx := f.open(t, storeOpts{})
		f.skipRefusedAttempts(t, fx.store)
		ib := newTestInbox(t, fx.store, inbox.Config{MaxAttempts: 1})
		for i := range 5 { // older crashed attempts, which a purge batch meets first
			crashedAttempt(t, f.context(), fx.store, "billing", fmt.Sprint("crashed-", i))
		}
		time.Sleep(5 * time.Millisecond)
		_, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-1", 1)
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
		_, err = inbox.Purge(ctx, fx.store, inbox.PurgeConfig{OlderThan: time.Millisecond, Force: true, BatchSize: 2})
		require.NoError(t, err)
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-1", 1)
		require.NoError(t, err, "a purged key's next delivery is new, not poison")
		require.False(t, dup)
	})

	t.Run("StoredResultWithTheOtherFeatures", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{lockTimeout: time.Second})
		f.skipRefusedAttempts(t, fx.store)
		counting := newTestInbox(t, fx.store, inbox.Config{MaxAttempts: 2})
		plain := newTestInbox(t, fx.store, inbox.Config{})
		result := []byte{0, 0xff, 'o', 'k'}
		run := func(ctx context.Context, ib *inbox.Inbox, key string) (inbox.Result, error) {
			return ib.ProcessResult(ctx, "billing", key, []byte("fp"), func(ctx context.Context) ([]byte, error) {
				return result, fx.ledger.credit(ctx, 1)
			})
		}
		// With MaxAttempts and LockTimeout: a context that ended stores nothing; the next
		// call stores the bytes and a duplicate gets them back.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := run(cctx, counting, "order-1")
		require.ErrorIs(t, err, context.Canceled)
		res, err := run(ctx, counting, "order-1")
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		require.Equal(t, result, res.Output)
		res, err = run(ctx, counting, "order-1")
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, result, res.Output)
		want := 1
		if !f.caps.noJoin { // in a transaction from another handle, the result commits with it
			want++
			tx, end := fx.beginOther(t)
			res, err := run(inbox.ContextWithTx(ctx, tx), plain, "order-2")
			require.NoError(t, err)
			require.False(t, res.Duplicate)
			require.NoError(t, end(true))
			res, err = run(ctx, plain, "order-2")
			require.NoError(t, err)
			require.True(t, res.Duplicate)
			require.Equal(t, result, res.Output)
		}
		_, credits := fx.ledger.balance(t)
		require.Equal(t, want, credits)
	})

	t.Run("ReplayKeepsTheBytes", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		produce := func() []*message.Message {
			out := message.NewMessage("cashback-\xff\xfe", []byte{0xff, 0, 'x'})
			out.Metadata.Set("x-death-\xc3", "\x00\xff binary") // amqpkey turns byte-array headers into strings
			out.Metadata.Set("type", "CashbackCredited ü")
			out.Metadata.Set("", "")
			return []*message.Message{out, message.NewMessage("receipt-1", nil)}
		}
		handler := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) { return produce(), nil })
		_, err := handler(f.message("order-1", []byte(`{}`)))
		require.NoError(t, err)
		again, err := handler(f.message("order-1", []byte(`{}`)))
		require.NoError(t, err)
		want := produce()
		require.Len(t, again, len(want))
		for i := range want {
			require.Equal(t, want[i].UUID, again[i].UUID)
			require.Equal(t, []byte(want[i].Payload), []byte(again[i].Payload))
			require.Equal(t, want[i].Metadata, again[i].Metadata)
		}
	})
}
