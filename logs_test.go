package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// logLine is one line a capturingLogger received.
type logLine struct {
	level  string
	msg    string
	err    error
	fields watermill.LogFields
}

// String renders everything the line carries, as any real logger would print it.
func (l logLine) String() string {
	return fmt.Sprintf("%s %s err=%v fields=%v", l.level, l.msg, l.err, l.fields)
}

// capturingLogger is a watermill.LoggerAdapter that keeps every line, for assertions.
type capturingLogger struct {
	mu     *sync.Mutex
	lines  *[]logLine
	fields watermill.LogFields
}

func newCapturingLogger() capturingLogger {
	return capturingLogger{mu: &sync.Mutex{}, lines: &[]logLine{}}
}

func (l capturingLogger) add(level, msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.lines = append(*l.lines, logLine{level: level, msg: msg, err: err, fields: l.fields.Add(fields)})
}

func (l capturingLogger) Error(msg string, err error, fields watermill.LogFields) {
	l.add("error", msg, err, fields)
}
func (l capturingLogger) Info(msg string, fields watermill.LogFields) {
	l.add("info", msg, nil, fields)
}
func (l capturingLogger) Debug(msg string, fields watermill.LogFields) {
	l.add("debug", msg, nil, fields)
}
func (l capturingLogger) Trace(msg string, fields watermill.LogFields) {
	l.add("trace", msg, nil, fields)
}
func (l capturingLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return capturingLogger{mu: l.mu, lines: l.lines, fields: l.fields.Add(fields)}
}

func (l capturingLogger) all() []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logLine(nil), *l.lines...)
}

// recordingObserver keeps every outcome it is told about.
type recordingObserver struct {
	mu       sync.Mutex
	outcomes []inbox.Outcome
}

func (o *recordingObserver) Observe(_ context.Context, ob inbox.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes = append(o.outcomes, ob.Outcome)
}

func (o *recordingObserver) all() []inbox.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]inbox.Outcome(nil), o.outcomes...)
}

// secretPayload must never appear in a log line.
const secretPayload = "card=4111111111111111;cvv=123"

func TestLogs_DuplicatesAtDebugWithoutThePayload(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	for _, mode := range []inbox.DuplicateMode{inbox.Replay, inbox.Skip, inbox.Fail} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			logger := newCapturingLogger()
			ib, err := inbox.New(inbox.Config{
				Store:       newPgxStore(t, pool, inbox.PostgresConfig{}),
				Consumer:    "billing",
				Key:         inbox.KeyFromMetadata("order_id"),
				OnDuplicate: mode,
				Logger:      logger,
			})
			require.NoError(t, err)
			h := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
				return []*message.Message{message.NewMessage("out-1", []byte(secretPayload))}, nil
			})
			first := message.NewMessage("uuid-first", []byte(secretPayload))
			first.Metadata.Set("order_id", "order-42")
			_, err = h(first)
			require.NoError(t, err)
			require.Empty(t, logger.all(), "a first delivery logs nothing")

			again := message.NewMessage("uuid-again", []byte(secretPayload))
			again.Metadata.Set("order_id", "order-42")
			_, err = h(again)
			if mode == inbox.Fail {
				require.ErrorIs(t, err, inbox.ErrDuplicate)
			} else {
				require.NoError(t, err)
			}

			lines := logger.all()
			require.Len(t, lines, 1)
			require.Equal(t, "debug", lines[0].level)
			require.Equal(t, "billing", lines[0].fields["consumer"])
			require.Equal(t, "order-42", lines[0].fields["key"])
			require.Equal(t, "uuid-again", lines[0].fields["message_uuid"])
			for _, l := range lines {
				require.NotContains(t, l.String(), secretPayload)
			}
		})
	}
}

func TestLogs_ProcessDuplicateAtDebug(t *testing.T) {
	t.Parallel()
	logger := newCapturingLogger()
	ib, err := inbox.New(inbox.Config{Store: newPgxStore(t, pgPool(t), inbox.PostgresConfig{}), Logger: logger})
	require.NoError(t, err)
	for range 2 {
		_, err := ib.Process(context.Background(), "webhooks", "evt-1", func(context.Context) error { return nil })
		require.NoError(t, err)
	}
	lines := logger.all()
	require.Len(t, lines, 1)
	require.Equal(t, "debug", lines[0].level)
	require.Equal(t, watermill.LogFields{"consumer": "webhooks", "key": "evt-1"}, lines[0].fields)
}

func TestLogs_NothingLoggedForFailuresCarriesThePayload(t *testing.T) {
	t.Parallel()
	logger := newCapturingLogger()
	ib, err := inbox.New(inbox.Config{
		Store:    newPgxStore(t, pgPool(t), inbox.PostgresConfig{}),
		Consumer: "billing",
		Key:      inbox.KeyFromMetadata("order_id"),
		Logger:   logger,
	})
	require.NoError(t, err)
	h := ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
		return nil, errors.New("handler failed")
	})
	noKey := message.NewMessage("uuid-nokey", []byte(secretPayload))
	_, err = h(noKey)
	require.ErrorIs(t, err, inbox.ErrNoKey)
	require.NotContains(t, err.Error(), secretPayload)

	failing := message.NewMessage("uuid-fail", []byte(secretPayload))
	failing.Metadata.Set("order_id", "order-7")
	_, err = h(failing)
	require.ErrorContains(t, err, "handler failed")
	require.NotContains(t, err.Error(), secretPayload)
	for _, l := range logger.all() {
		require.False(t, strings.Contains(l.String(), secretPayload), "log line carries the payload: %s", l)
	}
}
