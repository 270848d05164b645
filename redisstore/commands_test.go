package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// Commands with subcommands are checked by the subcommand's own entry of the command
// table: its key positions and flags. One that would fail inside the commit script is
// refused before anything runs, so the key is not committed without its effect and the
// redelivery processes the message.
func TestSubcommandsAreChecked(t *testing.T) {
	t.Parallel()
	exerciseSubcommands(t, sharedClient(t), redisstore.Config{CheckSlots: true})
}

func exerciseSubcommands(t *testing.T, client redis.UniversalClient, cfg redisstore.Config) {
	ctx := context.Background()
	cases := []struct {
		name  string
		queue func(ctx context.Context, tx *redisstore.Tx, other string) error
		want  error
	}{
		{"XGroupCreateOnAKeyInAnotherSlot", func(ctx context.Context, tx *redisstore.Tx, other string) error {
			return tx.XGroupCreateMkStream(ctx, other, "group", "$").Err()
		}, redisstore.ErrCrossSlot},
		{"ObjectEncodingOfAKeyInAnotherSlot", func(ctx context.Context, tx *redisstore.Tx, other string) error {
			return tx.ObjectEncoding(ctx, other).Err()
		}, redisstore.ErrCrossSlot},
		{"ScriptExistsNotAllowedInAScript", func(ctx context.Context, tx *redisstore.Tx, _ string) error {
			return tx.ScriptExists(ctx, "0000000000000000000000000000000000000000").Err()
		}, redisstore.ErrCommandRefused},
		{"ConfigGetNotAllowedInAScript", func(ctx context.Context, tx *redisstore.Tx, _ string) error {
			return tx.ConfigGet(ctx, "maxmemory").Err()
		}, redisstore.ErrCommandRefused},
		{"UnknownSubcommand", func(ctx context.Context, tx *redisstore.Tx, other string) error {
			return tx.Do(ctx, "xgroup", "nosuchsubcommand", other).Err()
		}, redisstore.ErrCommandRefused},
		{"ContainerWithoutASubcommand", func(ctx context.Context, tx *redisstore.Tx, _ string) error {
			return tx.Do(ctx, "object").Err()
		}, redisstore.ErrCommandRefused},
		{"SubcommandWithTooFewArguments", func(ctx context.Context, tx *redisstore.Tx, other string) error {
			return tx.Do(ctx, "xgroup", "create", other).Err()
		}, redisstore.ErrCommandRefused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store, ib := newStore(t, client, cfg)
			other := store.Config().Prefix + "stream:{elsewhere}"
			var counter string
			_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
				tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
				counter = store.Config().Prefix + "counter:" + tx.Tag()
				if err := tx.Incr(ctx, counter).Err(); err != nil {
					return err
				}
				return c.queue(ctx, tx, other)
			})
			require.ErrorIs(t, err, c.want)
			require.NotErrorIs(t, err, redisstore.ErrCommandFailed, "refused before the commit script ran")
			require.Zero(t, client.Exists(ctx, counter).Val(), "nothing was applied")
			require.Zero(t, client.Exists(ctx, other).Val(), "nothing was applied")

			dup, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
				tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
				return tx.Incr(ctx, counter).Err()
			})
			require.NoError(t, err)
			require.False(t, dup, "the key was not committed: the redelivery processes the message")
			require.Equal(t, "1", client.Get(ctx, counter).Val())
		})
	}

	t.Run("SubcommandInTheSlotIsApplied", func(t *testing.T) {
		t.Parallel()
		store, ib := newStore(t, client, cfg)
		var stream string
		_, err := ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
			tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
			stream = store.Config().Prefix + "stream:" + tx.Tag()
			return tx.XGroupCreateMkStream(ctx, stream, "group", "$").Err()
		})
		require.NoError(t, err)
		groups, err := client.XInfoGroups(ctx, stream).Result()
		require.NoError(t, err)
		require.Len(t, groups, 1)
	})
}
