package inbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// TestPostgresStoreCommitWithOutput: over a pool, the output's UPDATE and the COMMIT go
// in one pipeline; every way that can end gives the connection back to the pool without
// destroying it, and a failure stores nothing.
func TestPostgresStoreCommitWithOutput(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	table := tableName("inbox")
	store := newPgxStore(t, pool, inbox.PostgresConfig{Table: table})
	ctx := context.Background()
	deferred := pgx.Identifier{tableName("deferred")}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE TABLE `+deferred+` (id int, UNIQUE (id) DEFERRABLE INITIALLY DEFERRED); INSERT INTO `+deferred+` VALUES (1)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+deferred) })
	newConns := pool.Stat().NewConnsCount()

	claim := func(key string) inbox.Claim {
		c, err := store.Claim(ctx, inbox.Record{Consumer: "c", Key: key})
		require.NoError(t, err)
		require.False(t, c.Duplicate, key)
		return c
	}
	requireStored := func(key string, want []byte) {
		c, err := store.Claim(ctx, inbox.Record{Consumer: "c", Key: key})
		require.NoError(t, err)
		if want == nil {
			require.False(t, c.Duplicate, "%s: nothing was stored", key)
			require.NoError(t, c.Tx.Rollback(ctx))
			return
		}
		require.True(t, c.Duplicate, key)
		require.Equal(t, want, c.Output, key)
	}

	c := claim("ok")
	require.NoError(t, c.Tx.Commit(ctx, []byte("out\x00\xff")))
	require.NoError(t, c.Tx.Rollback(ctx), "a rollback after the commit does nothing")
	requireStored("ok", []byte("out\x00\xff"))

	c = claim("handler-committed")
	require.NoError(t, c.Tx.Handle().(pgx.Tx).Commit(ctx))
	require.ErrorIs(t, c.Tx.Commit(ctx, []byte("out")), inbox.ErrTxDone)
	require.NoError(t, c.Tx.Rollback(ctx))

	c = claim("aborted") // a statement failed and the handler went on
	_, err = c.Tx.Handle().(pgx.Tx).Exec(ctx, `SELECT 1/0`)
	require.Error(t, err)
	require.Error(t, c.Tx.Commit(ctx, []byte("out")))
	require.NoError(t, c.Tx.Rollback(ctx))
	requireStored("aborted", nil)

	c = claim("deferred") // the COMMIT itself fails
	_, err = c.Tx.Handle().(pgx.Tx).Exec(ctx, `INSERT INTO `+deferred+` VALUES (1)`)
	require.NoError(t, err)
	require.ErrorContains(t, c.Tx.Commit(ctx, []byte("out")), "23505")
	require.NoError(t, c.Tx.Rollback(ctx))
	requireStored("deferred", nil)

	stat := pool.Stat()
	require.Zero(t, stat.AcquiredConns(), "every connection went back to the pool")
	require.Equal(t, newConns, stat.NewConnsCount(), "no connection was destroyed and replaced")
}
