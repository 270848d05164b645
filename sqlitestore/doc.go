// Package sqlitestore is an inbox store on SQLite, through database/sql: the inbox's
// guarantee on one database file, with no server. Handlers get a *sql.Tx.
//
//	import _ "modernc.org/sqlite" // or another SQLite driver: see below
//
//	db, err := sql.Open("sqlite", sqlitestore.DSN("app.db"))
//	store, err := sqlitestore.New(db, sqlitestore.Config{})
//	err = store.CreateSchema(ctx)               // or run schema/sqlite.sql
//	ib, err := inbox.New(inbox.Config{Store: store})
//	router.AddMiddleware(ib.Middleware)
//
// The package imports database/sql and no driver, so that a build that does not use
// SQLite never compiles one: the program imports its driver. Tested drivers:
// modernc.org/sqlite (pure Go, no cgo; driver "sqlite"; DSN builds its
// data source names) and github.com/mattn/go-sqlite3 (cgo; driver "sqlite3"). The store
// reads the result codes those drivers expose (and github.com/ncruces/go-sqlite3's),
// never an error's text.
//
// # Settings
//
//   - busy_timeout: how long a transaction waits for another's write lock before
//     SQLITE_BUSY. On a handle whose busy_timeout is 0 (SQLite's default: a concurrent
//     duplicate would fail at once instead of waiting for the first delivery) the store
//     sets DefaultBusyTimeout itself for its claims, and puts 0 back. DSN sets 5 s.
//   - journal_mode=WAL: readers and the writer do not block each other. Every process
//     must be on one host (no network file system). Any journal mode works; DSN asks for
//     WAL.
//   - BEGIN IMMEDIATE (_txlock=immediate): a transaction takes the write lock at BEGIN.
//     The store's own transactions need it not (their first statement is the key's
//     insert, a write, which waits for the lock before reading anything), but a
//     transaction of yours that the inbox joins, or that reads and then writes, does:
//     in WAL a deferred transaction that read before another writer committed fails
//     with SQLITE_BUSY at its first write, without waiting.
//   - Pool size: one connection serves; more let reads and your own statements run
//     beside a claim. The stores of one process take turns at a file's write lock in a
//     queue of their own (ADR 81), so a waiting claim holds no connection.
//   - In memory: ":memory:" gives each connection a database of its own; Verify refuses
//     it behind a pool of more than one connection. With db.SetMaxOpenConns(1) it
//     serves one message at a time: anything else that needs the connection (a second
//     inbox.New, Stats, your reads) waits for the claim in flight to end. Tests that
//     deliver concurrently want a file in t.TempDir(), which behaves as in production.
//     A shared cache (cache=shared) answers a conflict with SQLITE_LOCKED: mattn/go-sqlite3
//     returns it (ErrContended), modernc.org/sqlite waits for the holder through
//     sqlite3_unlock_notify, without bound. The store's own claims queue before they meet it.
//   - synchronous: leave it FULL (the default) if a commit must survive a power loss
//     before the broker's ack; NORMAL in WAL can lose the last commits, whose messages
//     the broker then no longer has.
//
// # Attempts
//
// With inbox.Config.MaxAttempts, a running attempt holds an advisory lock on one byte of
// <database>-inbox-attempts.lock, which the kernel drops when its process dies: the
// claim counts only attempts whose byte is free (ADR 82). The database's directory must
// be writable.
//
// # What SQLite cannot do
//
//   - Count attempts beside a joined transaction: the owner holds, or will take, the only
//     write lock, so the attempt's row would wait for it; ClaimIn refuses a Record with
//     an Attempt with inbox.ErrAttemptsNeedConn.
//   - Notice a cancelled context while waiting for another process's lock: SQLite's
//     busy handler sleeps until busy_timeout (or the LockTimeout the store sets). Waits
//     for writers of the same process do notice it.
//   - Lose a connection to a server: it has none, so the conformance suite's broken
//     connection faults do not apply.
//
// Concurrent deliveries of one key serialise on the database's write lock, not on the
// key: SQLite runs one write transaction at a time, so handlers of different keys also
// take turns. Choose a server (PostgreSQL, MySQL) for many concurrent writers or for
// more than one host; see docs/sqlite.md.
package sqlitestore
