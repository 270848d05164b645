package redisstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/redisstore"
)

// Forget while a delivery is in flight: a user who forgets a key wants the message
// processed again, by a delivery that starts after the Forget. The delivery in flight
// claimed before it, so its commit is refused (ErrLeaseLost, nothing applied) and the
// message's next delivery processes it; a commit there would store the key again and
// make that delivery a duplicate.
func TestForgetDuringADeliveryRefusesItsCommit(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	store, ib := newStore(t, client, redisstore.Config{})
	counter := store.Config().Prefix + "counter"
	ctx := context.Background()

	inHandler, forgotten := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
			if err := incr(ctx, counter); err != nil {
				return err
			}
			close(inHandler)
			<-forgotten
			return nil
		})
		first <- err
	}()
	<-inHandler
	found, err := store.Forget(ctx, "billing", "order-1")
	require.NoError(t, err)
	require.False(t, found, "nothing committed yet")
	close(forgotten)
	require.ErrorIs(t, <-first, redisstore.ErrLeaseLost)
	require.Zero(t, client.Exists(ctx, counter).Val(), "the refused commit applied nothing")

	dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error { return incr(ctx, counter) })
	require.NoError(t, err)
	require.False(t, dup, "the next delivery processes the message")
	require.Equal(t, "1", client.Get(ctx, counter).Val())
}
