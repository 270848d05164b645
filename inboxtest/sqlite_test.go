package inboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver: pure Go, no server

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxtest"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// A handler test that needs nothing but go test: the inbox on a SQLite file in the
// test's temporary directory, as docs/sqlite.md shows it.
func TestCashbackOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlitestore.DSN(filepath.Join(t.TempDir(), "test.db")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlitestore.New(db, sqlitestore.Config{})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(ctx))
	_, err = db.Exec(`CREATE TABLE wallets (id TEXT PRIMARY KEY, cents INTEGER NOT NULL); INSERT INTO wallets VALUES ('alice', 0)`)
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store})
	require.NoError(t, err)

	credit := func(msg *message.Message) error { // the handler under test
		tx, err := inbox.RequireTx[*sql.Tx](msg.Context())
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(msg.Context(), `UPDATE wallets SET cents = cents + 190 WHERE id = 'alice'`)
		return err
	}
	balance := func() int64 {
		var cents int64
		require.NoError(t, db.QueryRow(`SELECT cents FROM wallets WHERE id = 'alice'`).Scan(&cents))
		return cents
	}
	h := ib.Middleware(inboxtest.HandlerFunc(credit))

	// 8 consumers at once: one processes the message, 7 wait for its commit and skip.
	order1 := inboxtest.Routed("billing", message.NewMessage("order-1", nil))
	duplicates := 0
	for _, r := range inboxtest.DeliverConcurrently(h, order1, 8) {
		require.NoError(t, r.Err)
		if r.Duplicate {
			duplicates++
		}
	}
	require.Equal(t, 7, duplicates)
	require.EqualValues(t, 190, balance())

	// A failure after the handler wrote rolls back; the next delivery processes it.
	order2 := inboxtest.Routed("billing", message.NewMessage("order-2", nil))
	require.ErrorIs(t, inboxtest.Deliver(ib.Middleware(inboxtest.FailAfter(1, credit)), order2).Err, inboxtest.ErrInjected)
	require.EqualValues(t, 190, balance())
	require.NoError(t, inboxtest.Deliver(h, order2).Err)
	require.EqualValues(t, 380, balance())

	// A crash after the commit, before the ack: the redelivery is a duplicate.
	first, again := inboxtest.CrashAfterCommit(h, inboxtest.Routed("billing", message.NewMessage("order-3", nil)))
	require.NoError(t, first.Err)
	require.True(t, again.Duplicate)
	require.EqualValues(t, 570, balance())

	require.NoError(t, inboxtest.CheckOnce(ib.Middleware, credit, inboxtest.Routed("billing", message.NewMessage("order-4", nil)),
		func() (any, error) { return balance(), nil }))
}

// On SQLite a write that escapes the inbox transaction (here through the application's
// own *sql.DB) does not double silently as on a server: it waits for the write lock the
// inbox transaction holds, and fails when busy_timeout runs out. CheckOnce reports it.
func TestEscapedWriteOnSQLiteFailsLoudly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(500)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlitestore.New(db, sqlitestore.Config{})
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(ctx))
	_, err = db.Exec(`CREATE TABLE wallets (cents INTEGER NOT NULL); INSERT INTO wallets VALUES (0)`)
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.NoError(t, err)

	escaping := func(msg *message.Message) error { // writes through db, not the inbox's tx
		_, err := db.ExecContext(msg.Context(), `UPDATE wallets SET cents = cents + 190`)
		return err
	}
	err = inboxtest.CheckOnce(ib.Middleware, escaping, message.NewMessage("order-1", nil), func() (any, error) {
		var cents int64
		return cents, db.QueryRow(`SELECT cents FROM wallets`).Scan(&cents)
	})
	require.Error(t, err)
	require.False(t, errors.Is(err, inboxtest.ErrEscaped), "nothing escaped: the write never committed")
	require.Contains(t, err.Error(), "should fail with the injected error")
	var cents int64
	require.NoError(t, db.QueryRow(`SELECT cents FROM wallets`).Scan(&cents))
	require.Zero(t, cents)
}
