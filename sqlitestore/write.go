package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// dbInfo is what the store reads of its database once, and the process's state of it.
type dbInfo struct {
	path    string        // the main database file; "" for an in-memory database
	busy    time.Duration // the handle's busy_timeout
	gate    *gate         // this process's queue for the file's write lock
	running *running      // the attempts running in this process (and the lock file)
	// bound is the wait for the write lock the store sets itself as the connection's
	// busy_timeout for a claim's first statement: Config.LockTimeout, or, on a handle
	// whose busy_timeout is 0, DefaultBusyTimeout; 0 when the handle's own applies.
	bound time.Duration
	// returning: the library is SQLite 3.35 or later, which batches need (RETURNING).
	returning bool
}

// info reads, once, the database's file and the handle's busy_timeout.
func (s *Store) info(ctx context.Context) (*dbInfo, error) {
	if known := s.known.Load(); known != nil {
		return known, nil
	}
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	if known := s.known.Load(); known != nil {
		return known, nil
	}
	var info dbInfo
	if err := s.db.QueryRowContext(ctx, `SELECT "file" FROM pragma_database_list WHERE "name" = 'main'`).Scan(&info.path); err != nil {
		return nil, s.wrap("reading the database's file name", err)
	}
	var ms int64
	if err := s.db.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&ms); err != nil {
		return nil, s.wrap("reading busy_timeout", err)
	}
	info.busy = time.Duration(ms) * time.Millisecond
	var major, minor int
	if err := s.db.QueryRowContext(ctx, `SELECT CAST(substr(sqlite_version(), 1, instr(sqlite_version(), '.') - 1) AS INTEGER), CAST(substr(sqlite_version(), instr(sqlite_version(), '.') + 1) AS INTEGER)`).Scan(&major, &minor); err != nil {
		return nil, s.wrap("reading the SQLite version", err)
	}
	info.returning = major > 3 || major == 3 && minor >= 35
	info.bound = s.cfg.LockTimeout
	if info.bound == 0 && info.busy == 0 {
		info.bound = DefaultBusyTimeout * time.Millisecond
	}
	info.gate = gateFor(info.path)
	info.running = runningFor(info.path)
	s.known.Store(&info)
	return &info, nil
}

// execer is what a *sql.Tx, *sql.DB and *sql.Conn share for a statement.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// lease is this process's turn at the database's write lock (the gate) and a connection
// of the store's own, with busy_timeout set to what is left of dbInfo.bound when there
// is one, until restore.
type lease struct {
	info *dbInfo
	conn sqlstore.DB
	// saved is the connection's busy_timeout (ms) to put back, -1 when the store did not
	// change it.
	saved int64
	// release gives the connection back and leaves the gate, once.
	release func()
}

// enter waits for the gate, then takes a connection: one of the pool's for a *sql.DB,
// the handle itself otherwise.
func (s *Store) enter(ctx context.Context, doing string) (*lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inbox: %s: %w", doing, err)
	}
	info, err := s.info(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	wait := info.bound
	if wait == 0 {
		wait = info.busy
	}
	leave, err := info.gate.enter(ctx, wait, s)
	if err != nil {
		return nil, fmt.Errorf("inbox: %s: %w", doing, err)
	}
	l := &lease{info: info, conn: s.db, saved: -1}
	closeConn := func() {}
	if pool, ok := s.db.(*sql.DB); ok {
		c, err := pool.Conn(ctx)
		if err != nil {
			leave()
			return nil, s.wrap("acquiring a connection", err)
		}
		l.conn, closeConn = c, func() { _ = c.Close() }
	}
	var once sync.Once
	l.release = func() { once.Do(func() { closeConn(); leave() }) }
	if info.bound > 0 {
		err := l.conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&l.saved)
		if err == nil {
			_, err = l.conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, boundMillis(ctx, info.bound-time.Since(start))))
		}
		if err != nil {
			_ = l.restore(ctx, l.conn)
			l.release()
			return nil, s.wrap("setting busy_timeout", err)
		}
	}
	return l, nil
}

// boundMillis is a busy_timeout of left, or less if ctx ends sooner, at least 1 ms.
func boundMillis(ctx context.Context, left time.Duration) int64 {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < left {
		left = time.Until(deadline)
	}
	return max(1, left.Milliseconds())
}

// restore puts back the connection's busy_timeout, when the store changed it, through
// db: a transaction or the connection. It runs whatever ctx's state, so the connection
// goes back to the pool as it came.
func (l *lease) restore(ctx context.Context, db execer) error {
	if l.saved < 0 {
		return nil
	}
	_, err := db.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf(`PRAGMA busy_timeout = %d`, l.saved))
	if err == nil {
		l.saved = -1
	}
	return err
}

// begin begins a transaction on the lease's connection with ctx's cancellation cut
// off, so that database/sql does not roll it back by itself (closing the connection
// under a *sql.Conn handle) between two statements of the store's; statements still see
// ctx.
func (l *lease) begin(ctx context.Context) (*sql.Tx, error) {
	return l.conn.BeginTx(context.WithoutCancel(ctx), nil)
}

// rollback rolls tx back; a transaction that already ended is not an error.
func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && err != sql.ErrTxDone {
		return fmt.Errorf("inbox: rolling back: %w", err)
	}
	return nil
}

// write runs fn in a short write transaction of the store's own, in this process's
// turn at the write lock, and commits; attempts whose end is pending (see
// running.pending) end with it.
func (s *Store) write(ctx context.Context, doing string, fn func(tx *sql.Tx) error) error {
	l, err := s.enter(ctx, doing)
	if err != nil {
		return err
	}
	defer l.release()
	tx, err := l.begin(ctx)
	if err != nil {
		return joinErrors(s.wrap(doing, err), l.restore(ctx, l.conn))
	}
	err = fn(tx)
	var ended []string
	if err == nil {
		ended, err = s.endPending(ctx, tx, l.info.running)
	}
	if restoreErr := l.restore(ctx, tx); err == nil && restoreErr != nil {
		err = fmt.Errorf("restoring busy_timeout: %w", restoreErr)
	}
	if err != nil {
		return joinErrors(s.wrap(doing, err), rollback(tx))
	}
	if err := tx.Commit(); err != nil {
		return s.wrap(doing+": committing", err)
	}
	l.info.running.end(ended...)
	return nil
}
