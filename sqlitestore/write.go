package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/watermill-inbox/inbox"
)

// dbInfo is what the store reads of its database once.
type dbInfo struct {
	path string        // the main database file; "" for an in-memory database
	busy time.Duration // the handle's busy_timeout
	gate *gate
}

// info reads, once, the database's file and the handle's busy_timeout.
func (s *Store) info(ctx context.Context) (*dbInfo, error) {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	if s.known != nil {
		return s.known, nil
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
	info.gate = gateFor(info.path)
	s.known = &info
	return s.known, nil
}

// conn returns a connection of the store's own for a transaction, and the func that
// gives it back: one of the pool's for a *sql.DB, the handle itself otherwise.
func (s *Store) conn(ctx context.Context) (inbox.SQLDB, func(), error) {
	if pool, ok := s.db.(*sql.DB); ok {
		c, err := pool.Conn(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { _ = c.Close() }, nil
	}
	return s.db, func() {}, nil
}

// writeTx is a write transaction of the store's own, on a connection of its own, with
// this process's turn at the database's write lock.
type writeTx struct {
	tx *sql.Tx
	// saved is the connection's busy_timeout (ms) to put back after the first statement,
	// -1 when the store did not change it.
	saved int64
	// release gives the connection back and leaves the gate, once.
	release func()
}

// begin enters the gate and begins a transaction on a connection of the store's own,
// with the connection's busy_timeout set to what is left of LockTimeout, when it is
// set, until restore. The transaction is begun with ctx's cancellation cut off, so that
// database/sql does not roll it back by itself (closing the connection under a
// *sql.Conn handle) between two statements of the store's; statements still see ctx.
func (s *Store) begin(ctx context.Context, doing string) (*writeTx, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inbox: %s: %w", doing, err)
	}
	info, err := s.info(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	wait := s.cfg.LockTimeout
	if wait == 0 {
		wait = info.busy
	}
	leave, err := info.gate.enter(ctx, wait, s)
	if err != nil {
		return nil, fmt.Errorf("inbox: %s: %w", doing, err)
	}
	conn, closeConn, err := s.conn(ctx)
	if err != nil {
		leave()
		return nil, s.wrap("acquiring a connection", err)
	}
	w := &writeTx{saved: -1}
	var once sync.Once
	w.release = func() { once.Do(func() { closeConn(); leave() }) }
	if s.cfg.LockTimeout > 0 {
		left := s.cfg.LockTimeout - time.Since(start)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < left {
			left = time.Until(deadline)
		}
		err := conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&w.saved)
		if err == nil {
			_, err = conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, max(1, left.Milliseconds())))
		}
		if err != nil {
			w.restore(ctx, conn)
			w.release()
			return nil, s.wrap("setting busy_timeout", err)
		}
	}
	if w.tx, err = conn.BeginTx(context.WithoutCancel(ctx), nil); err != nil {
		w.restore(ctx, conn)
		w.release()
		return nil, s.wrap("beginning the transaction", err)
	}
	return w, nil
}

// restore puts back the connection's busy_timeout, when the store changed it, through
// db: the transaction or the connection. It runs whatever ctx's state, so the connection
// goes back to the pool as it came.
func (w *writeTx) restore(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}) error {
	if w.saved < 0 {
		return nil
	}
	_, err := db.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf(`PRAGMA busy_timeout = %d`, w.saved))
	if err == nil {
		w.saved = -1
	}
	return err
}

// rollback rolls the transaction back and releases what begin took.
func (w *writeTx) rollback(ctx context.Context) error {
	defer w.release()
	restoreErr := w.restore(ctx, w.tx)
	if err := w.tx.Rollback(); err != nil && err != sql.ErrTxDone {
		return fmt.Errorf("inbox: rolling back: %w", err)
	}
	if restoreErr != nil {
		return fmt.Errorf("inbox: restoring busy_timeout: %w", restoreErr)
	}
	return nil
}

// write runs fn in a short write transaction of the store's own (begin), and commits.
func (s *Store) write(ctx context.Context, doing string, fn func(tx *sql.Tx) error) error {
	w, err := s.begin(ctx, doing)
	if err != nil {
		return err
	}
	err = fn(w.tx)
	if err == nil {
		if err = w.restore(ctx, w.tx); err != nil {
			err = fmt.Errorf("restoring busy_timeout: %w", err)
		}
	}
	if err != nil {
		rbErr := w.rollback(ctx)
		if rbErr != nil {
			return s.wrap(doing, fmt.Errorf("%w; %w", err, rbErr))
		}
		return s.wrap(doing, err)
	}
	defer w.release()
	if err := w.tx.Commit(); err != nil {
		return s.wrap(doing+": committing", err)
	}
	return nil
}
