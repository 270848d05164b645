package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// TestProcessResult runs the stored-result form of Process on every store: the bytes fn
// returns come back byte for byte on a duplicate, without fn running; a failure or a panic
// stores nothing; a different fingerprint is a mismatch, treated per OnMismatch.
func TestProcessResult(t *testing.T) {
	t.Parallel()
	for _, f := range storeFlavours() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			exerciseProcessResult(t, f)
		})
	}
}

func exerciseProcessResult(t *testing.T, f storeFlavour) {
	ctx := f.context()
	// Not valid UTF-8, with a NUL and bytes of every kind: exact bytes in, exact bytes out.
	binary := []byte{0x00, 0xff, 0xfe, '\'', '\\', 'x', 0x80, '\n', 0x01, '"'}
	for i := range 256 {
		binary = append(binary, byte(i))
	}

	t.Run("StoredOnceReturnedAgain", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		calls := 0
		fn := func(ctx context.Context) ([]byte, error) {
			calls++
			return binary, fx.ledger.credit(ctx, 5)
		}
		first, err := ib.ProcessResult(ctx, "billing", "order-1", []byte("fp"), fn)
		require.NoError(t, err)
		require.Equal(t, inbox.Result{Output: binary}, first)
		for range 2 {
			again, err := ib.ProcessResult(ctx, "billing", "order-1", []byte("fp"), fn)
			require.NoError(t, err)
			require.Equal(t, inbox.Result{Duplicate: true, Output: binary}, again)
		}
		require.Equal(t, 1, calls)
		total, credits := fx.ledger.balance(t)
		require.Equal(t, 5, total)
		require.Equal(t, 1, credits)

		// Another consumer has keys of its own; Process and ProcessResult share them.
		other, err := ib.ProcessResult(ctx, "shipping", "order-1", nil, fn)
		require.NoError(t, err)
		require.False(t, other.Duplicate)
		dup, err := ib.Process(ctx, "shipping", "order-1", func(context.Context) error { t.Fatal("a duplicate"); return nil })
		require.NoError(t, err)
		require.True(t, dup)
	})

	t.Run("EmptyOutput", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		for _, out := range [][]byte{nil, {}} {
			key := "empty-" + map[bool]string{true: "nil", false: "slice"}[out == nil]
			res, err := ib.ProcessResult(ctx, "billing", key, nil, func(context.Context) ([]byte, error) { return out, nil })
			require.NoError(t, err)
			require.Nil(t, res.Output)
			res, err = ib.ProcessResult(ctx, "billing", key, nil, func(context.Context) ([]byte, error) { return []byte("x"), nil })
			require.NoError(t, err)
			require.Equal(t, inbox.Result{Duplicate: true}, res)
		}
	})

	t.Run("FailureAndPanicStoreNothing", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		boom := errors.New("boom")
		_, err := ib.ProcessResult(ctx, "billing", "k", nil, func(ctx context.Context) ([]byte, error) {
			require.NoError(t, fx.ledger.credit(ctx, 1))
			return []byte("lost"), boom
		})
		require.ErrorIs(t, err, boom)
		require.Panics(t, func() {
			_, _ = ib.ProcessResult(ctx, "billing", "k", nil, func(ctx context.Context) ([]byte, error) {
				require.NoError(t, fx.ledger.credit(ctx, 1))
				panic("handler panic")
			})
		})
		total, _ := fx.ledger.balance(t)
		require.Zero(t, total, "the failed and panicked calls rolled back")

		res, err := ib.ProcessResult(ctx, "billing", "k", nil, func(ctx context.Context) ([]byte, error) {
			return []byte("kept"), fx.ledger.credit(ctx, 1)
		})
		require.NoError(t, err)
		require.Equal(t, inbox.Result{Output: []byte("kept")}, res)
		res, err = ib.ProcessResult(ctx, "billing", "k", nil, nil) // fn is never called on a duplicate
		require.NoError(t, err)
		require.Equal(t, []byte("kept"), res.Output)
	})

	t.Run("Mismatch", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		tests := []struct {
			name string
			mode inbox.DuplicateMode
			want inbox.Result
		}{
			{name: "Replay", mode: inbox.Replay, want: inbox.Result{Duplicate: true, Mismatch: true, Output: []byte("first")}},
			{name: "Skip", mode: inbox.Skip, want: inbox.Result{Duplicate: true, Mismatch: true}},
			{name: "Fail", mode: inbox.Fail},
		}
		for _, tt := range tests {
			ib := newTestInbox(t, fx.store, inbox.Config{Consumer: "c-" + tt.name, OnMismatch: tt.mode})
			first := func(context.Context) ([]byte, error) { return []byte("first"), nil }
			_, err := ib.ProcessResult(ctx, "c-"+tt.name, "k", []byte("fp-1"), first)
			require.NoError(t, err, tt.name)

			same, err := ib.ProcessResult(ctx, "c-"+tt.name, "k", []byte("fp-1"), nil)
			require.NoError(t, err, tt.name)
			require.Equal(t, inbox.Result{Duplicate: true, Output: []byte("first")}, same, "%s: the same fingerprint is no mismatch", tt.name)
			unknown, err := ib.ProcessResult(ctx, "c-"+tt.name, "k", nil, nil)
			require.NoError(t, err, tt.name)
			require.False(t, unknown.Mismatch, "%s: a nil fingerprint is not compared", tt.name)

			got, err := ib.ProcessResult(ctx, "c-"+tt.name, "k", []byte("fp-2"), nil)
			if tt.mode == inbox.Fail {
				require.ErrorIs(t, err, inbox.ErrFingerprintMismatch)
				require.ErrorIs(t, err, inbox.ErrDuplicate)
				continue
			}
			require.NoError(t, err, tt.name)
			require.Equal(t, tt.want, got, tt.name)
		}
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		type receipt struct {
			ID    string `json:"id"`
			Cents int    `json:"cents"`
		}
		calls := 0
		fn := func(ctx context.Context) (receipt, error) {
			calls++
			return receipt{ID: "r-1", Cents: 250}, fx.ledger.credit(ctx, 250)
		}
		v, dup, err := inbox.ProcessJSON(ctx, ib, "billing", "pay-1", nil, fn)
		require.NoError(t, err)
		require.False(t, dup)
		require.Equal(t, receipt{ID: "r-1", Cents: 250}, v)
		v, dup, err = inbox.ProcessJSON(ctx, ib, "billing", "pay-1", nil, fn)
		require.NoError(t, err)
		require.True(t, dup)
		require.Equal(t, receipt{ID: "r-1", Cents: 250}, v)
		require.Equal(t, 1, calls)

		// A stored result that is not T's JSON says so.
		_, err = ib.ProcessResult(ctx, "billing", "raw", nil, func(context.Context) ([]byte, error) { return []byte("not json"), nil })
		require.NoError(t, err)
		_, dup, err = inbox.ProcessJSON(ctx, ib, "billing", "raw", nil, fn)
		require.True(t, dup)
		require.ErrorContains(t, err, "decoding the stored result")
	})

	t.Run("NoKey", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		ib := newTestInbox(t, fx.store, inbox.Config{})
		_, err := ib.ProcessResult(ctx, "billing", "", nil, nil)
		require.ErrorIs(t, err, inbox.ErrNoKey)
		_, err = ib.ProcessResult(ctx, "", "k", nil, nil)
		require.ErrorIs(t, err, inbox.ErrNoConsumer)
	})
}
