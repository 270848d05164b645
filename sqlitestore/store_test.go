package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// New refuses what it can see in the config; Verify (inbox.New) what it sees in the
// database and the handle, each error naming what to change.
func TestNewAndVerify(t *testing.T) {
	t.Parallel()
	_, err := sqlitestore.New(nil, sqlitestore.Config{})
	require.ErrorContains(t, err, "db is nil")
	_, err = sqlitestore.New(open(t, "sqlite", sqlitestore.DSN(tempPath(t))), sqlitestore.Config{Table: "inbox; drop"})
	require.ErrorContains(t, err, "inbox: invalid store config: Table")
	_, err = sqlitestore.New(open(t, "sqlite", sqlitestore.DSN(tempPath(t))), sqlitestore.Config{LockTimeout: -time.Second})
	require.ErrorContains(t, err, "LockTimeout")

	tests := []struct {
		name    string
		open    func(t *testing.T) *sqlitestore.Store
		wantErr error  // errors.Is
		want    string // in the message; both empty: accepted
	}{
		{name: "modernc, DSN", open: func(t *testing.T) *sqlitestore.Store {
			return newStore(t, open(t, "sqlite", sqlitestore.DSN(tempPath(t))), sqlitestore.Config{})
		}},
		{name: "mattn, its default busy_timeout (5 s)", open: func(t *testing.T) *sqlitestore.Store {
			return newStore(t, open(t, "sqlite3", "file:"+tempPath(t)), sqlitestore.Config{})
		}},
		{name: "modernc, no busy_timeout: the store bounds the wait itself", open: func(t *testing.T) *sqlitestore.Store {
			return newStore(t, open(t, "sqlite", tempPath(t)), sqlitestore.Config{})
		}},
		{name: "no busy_timeout, but LockTimeout", open: func(t *testing.T) *sqlitestore.Store {
			return newStore(t, open(t, "sqlite", tempPath(t)), sqlitestore.Config{LockTimeout: time.Second})
		}},
		{name: "no table", wantErr: inbox.ErrNoTable, want: "inbox schema sqlite", open: func(t *testing.T) *sqlitestore.Store {
			store, err := sqlitestore.New(open(t, "sqlite", sqlitestore.DSN(tempPath(t))), sqlitestore.Config{Table: "orders_inbox"})
			require.NoError(t, err)
			return store
		}},
		{name: "an outdated table", wantErr: inbox.ErrNoTable, want: `table "inbox_attempts" lacks the columns started_at`, open: func(t *testing.T) *sqlitestore.Store {
			db := open(t, "sqlite", sqlitestore.DSN(tempPath(t)))
			store := newStore(t, db, sqlitestore.Config{})
			_, err := db.Exec(`ALTER TABLE inbox_attempts DROP COLUMN started_at`)
			require.NoError(t, err)
			return store
		}},
		{name: ":memory: behind a pool", want: "each connection to :memory: has a database of its own", open: func(t *testing.T) *sqlitestore.Store {
			return newStore(t, open(t, "sqlite", ":memory:?_pragma=busy_timeout(5000)"), sqlitestore.Config{})
		}},
		{name: ":memory: on one connection", open: func(t *testing.T) *sqlitestore.Store {
			db := open(t, "sqlite", ":memory:?_pragma=busy_timeout(5000)")
			db.SetMaxOpenConns(1)
			return newStore(t, db, sqlitestore.Config{})
		}},
		{name: "shared cache", open: func(t *testing.T) *sqlitestore.Store {
			return newStore(t, open(t, "sqlite", "file:"+t.Name()+"?mode=memory&cache=shared&_pragma=busy_timeout(5000)"), sqlitestore.Config{})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := inbox.New(inbox.Config{Store: tt.open(t), Consumer: "billing"})
			if tt.wantErr == nil && tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// A claim that meets a writer outside this process's stores (here another handle's
// transaction) waits in SQLite's busy handler, bounded by LockTimeout, and the driver's
// SQLITE_BUSY is inbox.ErrContended; read from each driver's own error type.
func TestBusyIsContended(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := tempPath(t)
			store := newStore(t, open(t, d.name, d.dsn(path)), sqlitestore.Config{LockTimeout: 200 * time.Millisecond})
			other := open(t, d.name, d.dsn(path))
			holder, err := other.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = holder.Exec(`INSERT INTO inbox (consumer, key, processed_at) VALUES ('billing', 'held', 0)`)
			require.NoError(t, err)

			_, err = store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-1"})
			require.ErrorIs(t, err, inbox.ErrContended)
			require.ErrorContains(t, err, "LockTimeout")
			require.NoError(t, holder.Rollback())

			claim, err := store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-1"})
			require.NoError(t, err, "the lock is free again")
			require.NoError(t, claim.Tx.Commit(ctx, nil))
		})
	}
}

// In a shared cache a conflict with a writer outside the store is SQLITE_LOCKED, at
// once: mattn/go-sqlite3 returns it (inbox.ErrContended), modernc.org/sqlite waits for
// the holder with sqlite3_unlock_notify, past LockTimeout (docs/sqlite.md).
func TestSharedCacheConflicts(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := open(t, d.name, "file:"+d.name+"?mode=memory&cache=shared&_pragma=busy_timeout(5000)&_busy_timeout=5000")
			db.SetMaxOpenConns(4)
			store := newStore(t, db, sqlitestore.Config{LockTimeout: 100 * time.Millisecond})
			holder, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = holder.Exec(`INSERT INTO inbox (consumer, key, processed_at) VALUES ('billing', 'held', 0)`)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() {
				claim, err := store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-1"})
				if err == nil {
					err = claim.Tx.Commit(ctx, nil)
				}
				done <- err
			}()
			if d.name == "sqlite3" {
				require.ErrorIs(t, <-done, inbox.ErrContended)
				require.NoError(t, holder.Rollback())
				return
			}
			select {
			case err := <-done:
				t.Fatalf("modernc waits for the shared cache's holder, got %v", err)
			case <-time.After(500 * time.Millisecond):
			}
			require.NoError(t, holder.Rollback())
			require.NoError(t, <-done, "the holder ended: the claim goes on")
		})
	}
}

// A claim waiting for another claim of this process notices its context ending: it
// returns the context's error, not ErrContended after busy_timeout.
func TestWaitingClaimSeesItsContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t, open(t, "sqlite", sqlitestore.DSN(tempPath(t))), sqlitestore.Config{})
	held, err := store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "order-1"})
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := store.Claim(cctx, inbox.Record{Consumer: "billing", Key: "order-1"})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the second claim must wait for the first, got %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, inbox.ErrContended)
	require.NoError(t, held.Tx.Rollback(ctx))
}

// DSN escapes what a file: URI would read otherwise: the file is where the path says.
func TestDSNEscapesThePath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a dir?with #odd %20 names")
	require.NoError(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "app?.db")
	db := open(t, "sqlite", sqlitestore.DSN(path))
	newStore(t, db, sqlitestore.Config{})
	_, err := os.Stat(path)
	require.NoError(t, err)
	var mode string
	require.NoError(t, db.QueryRow(`PRAGMA journal_mode`).Scan(&mode))
	require.Equal(t, "wal", mode)
	var busy int
	require.NoError(t, db.QueryRow(`PRAGMA busy_timeout`).Scan(&busy))
	require.Equal(t, sqlitestore.DefaultBusyTimeout, busy)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	for _, e := range entries {
		require.Contains(t, e.Name(), "app?.db", "no other file was created")
	}
}
