package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// With PostgresConfig.LockTimeout, a concurrent duplicate gives up after the bound with
// ErrContended and hands its connection back to the pool, while the first delivery's
// handler is still running.
func TestLockTimeout_ContendedDuplicateReleasesItsConnection(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	pool := pgPool(t)
	table := tableName("lockwait")
	first, err := inbox.New(inbox.Config{Store: newPgxStore(t, pool, inbox.PostgresConfig{Table: table})})
	require.NoError(t, err)
	boundedStore, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table, LockTimeout: bound})
	require.NoError(t, err)
	obs := &recordingObserver{}
	bounded, err := inbox.New(inbox.Config{Store: boundedStore, Observer: obs})
	require.NoError(t, err)

	holding, release, firstDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := first.Process(context.Background(), "orders", "order-1", func(context.Context) error {
			close(holding)
			<-release
			return nil
		})
		firstDone <- err
	}()
	<-holding
	require.Equal(t, int32(1), pool.Stat().AcquiredConns(), "the first delivery holds one connection")

	start := time.Now()
	dup, err := bounded.Process(context.Background(), "orders", "order-1", func(context.Context) error {
		t.Error("the contended duplicate's handler ran")
		return nil
	})
	waited := time.Since(start)
	require.ErrorIs(t, err, inbox.ErrContended)
	require.False(t, dup)
	require.GreaterOrEqual(t, waited, bound, "it gave up only after the lock timeout")
	t.Logf("the contended duplicate gave up after %v (LockTimeout %v)", waited, bound)

	select {
	case err := <-firstDone:
		t.Fatalf("the first delivery ended (%v) before the check", err)
	default:
	}
	require.Equal(t, int32(1), pool.Stat().AcquiredConns(), "the duplicate's connection is back in the pool while the first still runs")
	require.Equal(t, []inbox.Outcome{inbox.OutcomeContended}, obs.all())

	close(release)
	require.NoError(t, <-firstDone)
	dup, err = bounded.Process(context.Background(), "orders", "order-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.True(t, dup, "once the first committed, the redelivery is a plain duplicate")
}

// The bound applies to the inbox statement only: the handler's own statements run under
// the server's lock_timeout, and the pooled connection keeps no trace of it.
func TestLockTimeout_OnlyForTheInboxStatement(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	var serverDefault string
	require.NoError(t, pool.QueryRow(context.Background(), `SHOW lock_timeout`).Scan(&serverDefault))

	store := newPgxStore(t, pool, inbox.PostgresConfig{LockTimeout: 250 * time.Millisecond})
	ib, err := inbox.New(inbox.Config{Store: store})
	require.NoError(t, err)
	var inHandler string
	_, err = ib.Process(context.Background(), "orders", "order-1", func(ctx context.Context) error {
		tx, _ := inbox.TxFromContext[pgx.Tx](ctx)
		return tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&inHandler)
	})
	require.NoError(t, err)
	require.Equal(t, serverDefault, inHandler)
}

// The same on MariaDB with MySQLConfig.LockTimeout (innodb_lock_wait_timeout, whole
// seconds): the contended duplicate's connection goes back to the database/sql pool.
func TestLockTimeout_MariaDBContendedDuplicateReleasesItsConnection(t *testing.T) {
	t.Parallel()
	const bound = time.Second
	db := mariaDB(t)
	table := tableName("lockwait")
	first, err := inbox.New(inbox.Config{Store: newMySQLStore(t, db, inbox.MySQLConfig{Table: table})})
	require.NoError(t, err)
	boundedStore, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table, LockTimeout: bound})
	require.NoError(t, err)
	bounded, err := inbox.New(inbox.Config{Store: boundedStore})
	require.NoError(t, err)

	holding, release, firstDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := first.Process(context.Background(), "orders", "order-1", func(context.Context) error {
			close(holding)
			<-release
			return nil
		})
		firstDone <- err
	}()
	<-holding
	require.Equal(t, 1, db.Stats().InUse, "the first delivery holds one connection")

	start := time.Now()
	_, err = bounded.Process(context.Background(), "orders", "order-1", func(context.Context) error {
		t.Error("the contended duplicate's handler ran")
		return nil
	})
	waited := time.Since(start)
	require.ErrorIs(t, err, inbox.ErrContended)
	require.GreaterOrEqual(t, waited, bound)
	t.Logf("the contended duplicate gave up after %v (LockTimeout %v)", waited, bound)
	select {
	case err := <-firstDone:
		t.Fatalf("the first delivery ended (%v) before the check", err)
	default:
	}
	require.Equal(t, 1, db.Stats().InUse, "the duplicate's connection is back in the pool while the first still runs")

	close(release)
	require.NoError(t, <-firstDone)
}
