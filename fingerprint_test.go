package inbox_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// A duplicate key whose payload differs from the first delivery's is a producer bug or a
// key collision: counted, marked, logged, and replayed or failed per OnMismatch.
func TestFingerprint_SameKeyDifferentMessage(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	tests := []struct {
		name        string
		onMismatch  inbox.DuplicateMode
		fingerprint inbox.FingerprintFunc
		second      string // the redelivery's payload; the first is "amount=10"
		wantOutcome inbox.Outcome
		wantErr     bool
		wantReplay  int
	}{
		{name: "different payload, Replay by default", second: "amount=99", wantOutcome: inbox.OutcomeMismatch, wantReplay: 1},
		{name: "different payload, Skip", onMismatch: inbox.Skip, second: "amount=99", wantOutcome: inbox.OutcomeMismatch},
		{name: "different payload, Fail", onMismatch: inbox.Fail, second: "amount=99", wantOutcome: inbox.OutcomeMismatch, wantErr: true},
		{name: "same payload is a plain duplicate", onMismatch: inbox.Fail, second: "amount=10", wantOutcome: inbox.OutcomeReplayed, wantReplay: 1},
		{name: "NoFingerprint never mismatches", onMismatch: inbox.Fail, fingerprint: inbox.NoFingerprint, second: "amount=99", wantOutcome: inbox.OutcomeReplayed, wantReplay: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs := &recordingObserver{}
			logger := newCapturingLogger()
			ib, err := inbox.New(inbox.Config{
				Store:       newPgxStore(t, pool, inbox.PostgresConfig{}),
				Consumer:    "billing",
				Key:         inbox.KeyFromMetadata("order_id"),
				Fingerprint: tt.fingerprint,
				OnMismatch:  tt.onMismatch,
				Observer:    obs,
				Logger:      logger,
			})
			require.NoError(t, err)
			h := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
				return []*message.Message{message.NewMessage("receipt-1", []byte("ok"))}, nil
			})

			first := message.NewMessage("uuid-first", []byte("amount=10"))
			first.Metadata.Set("order_id", "order-1")
			_, err = h(first)
			require.NoError(t, err)
			require.Empty(t, first.Metadata.Get(inbox.MetadataMismatch))

			second := message.NewMessage("uuid-second", []byte(tt.second))
			second.Metadata.Set("order_id", "order-1")
			replayed, err := h(second)
			if tt.wantErr {
				require.ErrorIs(t, err, inbox.ErrFingerprintMismatch)
				require.ErrorIs(t, err, inbox.ErrDuplicate)
				require.ErrorContains(t, err, "uuid-second")
			} else {
				require.NoError(t, err)
			}
			require.Len(t, replayed, tt.wantReplay)

			require.Equal(t, []inbox.Outcome{inbox.OutcomeProcessed, tt.wantOutcome}, obs.all())
			require.Equal(t, "true", second.Metadata.Get(inbox.MetadataDuplicate))
			var errorLines []logLine
			for _, l := range logger.all() {
				if l.level == "error" {
					errorLines = append(errorLines, l)
				}
			}
			if tt.wantOutcome != inbox.OutcomeMismatch {
				require.Empty(t, second.Metadata.Get(inbox.MetadataMismatch))
				require.Empty(t, errorLines)
				return
			}
			require.Equal(t, "true", second.Metadata.Get(inbox.MetadataMismatch))
			require.Len(t, errorLines, 1)
			require.ErrorIs(t, errorLines[0].err, inbox.ErrFingerprintMismatch)
			require.Equal(t, "billing", errorLines[0].fields["consumer"])
			require.Equal(t, "order-1", errorLines[0].fields["key"])
			require.Equal(t, "uuid-second", errorLines[0].fields["message_uuid"])
		})
	}
}

// A stale mismatch mark (copied from a failed attempt's metadata) is cleared on entry.
func TestFingerprint_StaleMarkCleared(t *testing.T) {
	t.Parallel()
	ib, err := inbox.New(inbox.Config{Store: newPgxStore(t, pgPool(t), inbox.PostgresConfig{}), Consumer: "billing"})
	require.NoError(t, err)
	m := message.NewMessage("uuid-1", []byte("x"))
	m.Metadata.Set(inbox.MetadataMismatch, "true")
	m.Metadata.Set(inbox.MetadataDuplicate, "true")
	_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(m)
	require.NoError(t, err)
	require.Empty(t, m.Metadata.Get(inbox.MetadataMismatch))
	require.Empty(t, m.Metadata.Get(inbox.MetadataDuplicate))
}
