package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/redisstore"
)

// uuidKey is the Deduplicator key factory to use with the Redis repository: the
// default hashes the payload, so two messages with one body would count as one.
func uuidKey(msg *message.Message) (string, error) { return msg.UUID, nil }

// dedupHandler returns the Deduplicator middleware over repo around a handler that
// counts its calls.
func dedupHandler(repo *redisstore.ExpiringKeyRepository, timeout time.Duration, calls *int) message.HandlerFunc {
	dedup := middleware.Deduplicator{KeyFactory: uuidKey, Repository: repo, Timeout: timeout}
	return dedup.Middleware(func(*message.Message) ([]*message.Message, error) {
		*calls++
		return nil, nil
	})
}

// A check whose connection breaks after the server ran it is resent by go-redis: the
// resend must give the first answer (new), not find its own key and drop the message.
func TestDedupCheckResentGivesTheFirstAnswer(t *testing.T) {
	t.Parallel()
	b := &breaker{}
	client := breakerClient(t, b, nil)
	prefix := testPrefix(t, client)
	repo, err := redisstore.NewExpiringKeyRepository(client, redisstore.DedupConfig{Window: time.Minute, Prefix: prefix})
	require.NoError(t, err)
	calls := 0
	h := dedupHandler(repo, 10*time.Second, &calls)

	b.breakNext(1, naming(prefix))
	msg := message.NewMessage("msg-1", []byte("payload"))
	_, err = h(msg)
	require.NoError(t, err)
	require.EqualValues(t, 1, b.broken.Load(), "the check's connection broke after the server ran it")
	require.Equal(t, 1, calls, "the resent check gave the first answer: the first delivery is processed")

	_, err = h(msg.Copy())
	require.NoError(t, err)
	require.Equal(t, 1, calls, "the redelivery is dropped")
}

// The Deduplicator's Timeout holds with a default go-redis client (ContextTimeoutEnabled
// false): a check whose reply is held back returns when the Timeout ends, and what it
// stored does not make the redelivery a duplicate.
func TestDedupTimeoutHolds(t *testing.T) {
	t.Parallel()
	for _, undoFirst := range []bool{false, true} {
		name := "RedeliveryBeforeTheUndoTakesTheKeyOver"
		if undoFirst {
			name = "RedeliveryAfterTheUndo"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := &breaker{}
			client := breakerClient(t, b, nil)
			prefix := testPrefix(t, client)
			repo, err := redisstore.NewExpiringKeyRepository(client, redisstore.DedupConfig{Window: time.Minute, Prefix: prefix})
			require.NoError(t, err)
			calls := 0
			h := dedupHandler(repo, 50*time.Millisecond, &calls)
			redelivered := dedupHandler(repo, 10*time.Second, &calls) // no Timeout in the way
			msg := message.NewMessage("msg-1", []byte("payload"))

			held, release := b.holdNext(naming(prefix))
			t.Cleanup(release)
			returned := make(chan error, 1)
			go func() {
				_, err := h(msg)
				returned <- err
			}()
			<-held // the server ran the check and stored the key; its reply is held back
			select {
			case err := <-returned:
				require.ErrorIs(t, err, context.DeadlineExceeded, "the check gave up at the Timeout: the message is nacked")
			case <-time.After(10 * time.Second):
				t.Fatal("the check did not return while Redis's reply was held back: the Deduplicator's Timeout does not hold")
			}
			require.Zero(t, calls)

			if undoFirst {
				undone := b.observeNext(naming(prefix))
				release()
				<-undone
			}
			_, err = redelivered(msg.Copy())
			require.NoError(t, err)
			require.Equal(t, 1, calls, "the redelivery is processed: the key of the check that gave up does not count")

			if !undoFirst {
				undone := b.observeNext(naming(prefix))
				release()
				<-undone // the undo of the abandoned check found the key taken over, and left it
			}
			_, err = redelivered(msg.Copy())
			require.NoError(t, err)
			require.Equal(t, 1, calls, "the next redelivery is a duplicate")
		})
	}
}
