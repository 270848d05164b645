package postgresstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox/internal/contract"
)

var (
	_ contract.PurgeTurns   = (*Store)(nil)
	_ contract.PurgeTurns   = (*SQLStore)(nil)
	_ contract.PurgeCounter = (*Store)(nil)
	_ contract.PurgeCounter = (*SQLStore)(nil)
)

// purgeCountSQL counts what a purge before $1 would delete from table t and attempts a.
func purgeCountSQL(t, a string) string {
	return `SELECT (SELECT count(*) FROM ` + t + ` WHERE processed_at < $1), (SELECT count(*) FROM ` + a + ` WHERE started_at < $1)`
}

// CountPurge implements contract.PurgeCounter, for `inbox purge --dry-run`.
func (s *Store) CountPurge(ctx context.Context, before time.Time) (contract.Purged, error) {
	var n contract.Purged
	err := s.db.QueryRow(ctx, purgeCountSQL(s.sql.table, pgName(s.cfg.Schema, s.cfg.Table+"_attempts")), before).Scan(&n.Keys, &n.Attempts)
	if err != nil {
		return contract.Purged{}, s.wrap("counting what a purge would delete", err)
	}
	return n, nil
}

// CountPurge implements contract.PurgeCounter, for `inbox purge --dry-run`.
func (s *SQLStore) CountPurge(ctx context.Context, before time.Time) (contract.Purged, error) {
	var n contract.Purged
	err := s.db.QueryRowContext(ctx, purgeCountSQL(s.sql.table, pgName(s.cfg.Schema, s.cfg.Table+"_attempts")), before).Scan(&n.Keys, &n.Attempts)
	if err != nil {
		return contract.Purged{}, s.wrap("counting what a purge would delete", err)
	}
	return n, nil
}

// Forget implements Store.
func (s *SQLStore) Forget(ctx context.Context, consumer, key string) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.sql.forget, consumer, contract.StorableKey(key))
	if err != nil {
		return false, s.wrap("forgetting the key", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, s.wrap("forgetting the key", err)
	}
	return n > 0, nil
}

// PurgeBatch implements Store, for inbox.Purge and inbox.PurgeEvery: call those.
func (s *SQLStore) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	var n contract.Purged
	if err := s.db.QueryRowContext(ctx, s.sql.purge, before, limit).Scan(&n.Keys, &n.Attempts); err != nil {
		return contract.Purged{}, s.wrap("purging", err)
	}
	return n, nil
}

// Forget implements Store.
func (s *Store) Forget(ctx context.Context, consumer, key string) (bool, error) {
	tag, err := s.db.Exec(ctx, s.sql.forget, consumer, contract.StorableKey(key))
	if err != nil {
		return false, s.wrap("forgetting the key", err)
	}
	return tag.RowsAffected() > 0, nil
}

// PurgeBatch implements Store, for inbox.Purge and inbox.PurgeEvery: call those.
func (s *Store) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	var n contract.Purged
	if err := s.db.QueryRow(ctx, s.sql.purge, before, limit).Scan(&n.Keys, &n.Attempts); err != nil {
		return contract.Purged{}, s.wrap("purging", err)
	}
	return n, nil
}

// A purge turn on PostgreSQL (contract.PurgeTurns) is a session advisory lock of the
// two-key form, which does not meet the attempts' one-key locks: the first key is
// purgeTurnClass, the second the inbox table's OID (shifted into an int4), so that the
// turn is per table, schemas and search_path included. The turn runs on a connection
// of its own, which is closed when the turn ends, never given back to a pool with its
// lock or its idle_session_timeout.

// purgeTurnClass is the first key of a purge turn's advisory lock: "inbx".
const purgeTurnClass = 0x696e6278

// purgeTurnLock tries the lock of table $1 and, when it got it, bounds the session's
// idle time to $2 (PostgreSQL 14 and later, where idle_session_timeout exists).
var purgeTurnLock = `SELECT l, CASE WHEN l AND current_setting('server_version_num')::int >= 140000
	THEN set_config('idle_session_timeout', $2, false) END IS NOT NULL
	FROM pg_try_advisory_lock(` + strconv.Itoa(purgeTurnClass) + `, ($1::regclass::oid::bigint - 2147483648)::int) l`

// purgeTurnUnlock releases the lock of table $1, so that the next holder need not wait
// for the server to notice the closed connection.
var purgeTurnUnlock = `SELECT pg_advisory_unlock(` + strconv.Itoa(purgeTurnClass) + `, ($1::regclass::oid::bigint - 2147483648)::int)`

// turnSession is the connection a purge turn runs on: pgx's or database/sql's.
type turnSession interface {
	scan(ctx context.Context, query string, args []any, dest ...any) error
	// close closes the session for good, its lock with it.
	close(ctx context.Context)
	// giveBack returns a session that took no lock to its pool, or closes it.
	giveBack(ctx context.Context)
}

// pgxSession is a turn's session on a pgx connection: one of a pool's, closed at the
// end (hijacked from the pool), or one opened for the turn.
type pgxSession struct {
	conn    *pgx.Conn
	pooled  *pgxpool.Conn // nil for a connection of the turn's own
	closeMu sync.Once
}

func (p *pgxSession) scan(ctx context.Context, query string, args []any, dest ...any) error {
	return p.conn.QueryRow(ctx, query, args...).Scan(dest...)
}

func (p *pgxSession) close(ctx context.Context) {
	p.closeMu.Do(func() {
		conn := p.conn
		if p.pooled != nil {
			conn = p.pooled.Hijack() // out of the pool for good: it leaves with the lock
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	})
}

func (p *pgxSession) giveBack(ctx context.Context) {
	if p.pooled == nil {
		p.close(ctx)
		return
	}
	p.closeMu.Do(p.pooled.Release)
}

// sqlSession is a turn's session on a database/sql connection of a *sql.DB's.
type sqlSession struct {
	conn    *sql.Conn
	closeMu sync.Once
}

func (s *sqlSession) scan(ctx context.Context, query string, args []any, dest ...any) error {
	return s.conn.QueryRowContext(ctx, query, args...).Scan(dest...)
}

func (s *sqlSession) close(context.Context) {
	s.closeMu.Do(func() {
		// driver.ErrBadConn makes database/sql close the connection instead of pooling it.
		_ = s.conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = s.conn.Close()
	})
}

func (s *sqlSession) giveBack(context.Context) { s.closeMu.Do(func() { _ = s.conn.Close() }) }

// ownConn opens a connection of conn's config, for a turn on a store whose handle is
// one connection: the turn must not hold the lock on the connection messages use.
func ownConn(ctx context.Context, conn *pgx.Conn) (turnSession, error) {
	c, err := pgx.ConnectConfig(ctx, conn.Config())
	if err != nil {
		return nil, fmt.Errorf("opening a connection for the purge turn: %w", err)
	}
	return &pgxSession{conn: c}, nil
}

// pgTurn is a purge turn held on a session.
type pgTurn struct {
	session turnSession
	purge   string
	table   string
	wrap    func(doing string, err error) error
}

func (t *pgTurn) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	var n contract.Purged
	if err := t.session.scan(ctx, t.purge, []any{before, limit}, &n.Keys, &n.Attempts); err != nil {
		return contract.Purged{}, t.wrap("purging in the purge turn", err)
	}
	return n, nil
}

func (t *pgTurn) Release(ctx context.Context) error {
	unlock, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var released bool
	_ = t.session.scan(unlock, purgeTurnUnlock, []any{t.table}, &released) // a session already lost has no lock left
	t.session.close(ctx)
	return nil
}

// takeTurn tries the turn's lock on session, and returns the turn, or nil when another
// session holds it (the session then goes back).
func takeTurn(ctx context.Context, session turnSession, pooler *poolerCheck, q postgresQueries, idle time.Duration,
	wrap func(string, error) error) (contract.PurgeTurn, error) {
	moves, err := pooler.movesTransactions(ctx)
	if err == nil && moves {
		err = fmt.Errorf("inbox: %w: give the retention a store of its own on the same table, connected to PostgreSQL directly (or through a pooler in session mode)", contract.ErrPurgeTurnBehindPooler)
	}
	if err != nil {
		session.giveBack(ctx)
		return nil, err
	}
	timeout := strconv.FormatInt((idle + contract.IdleMargin).Milliseconds(), 10)
	var got, bounded bool
	if err := session.scan(ctx, purgeTurnLock, []any{q.table, timeout}, &got, &bounded); err != nil {
		session.close(ctx) // the lock's fate is not known: the connection goes with it
		return nil, wrap("taking the purge turn", err)
	}
	if !got {
		session.giveBack(ctx)
		return nil, nil
	}
	return &pgTurn{session: session, purge: q.purge, table: q.table, wrap: wrap}, nil
}

// TakePurgeTurn implements contract.PurgeTurns: see the notes above pgxSession. Over a
// pool the turn takes one of its connections, and closes it when the turn ends; over
// one connection (*pgx.Conn, *pgxpool.Conn) it opens one of its own, of that
// connection's config. Behind a pooler in transaction mode it fails with
// ErrPurgeTurnBehindPooler.
func (s *Store) TakePurgeTurn(ctx context.Context, idle time.Duration) (contract.PurgeTurn, error) {
	var session turnSession
	switch db := s.db.(type) {
	case *pgxpool.Pool:
		c, err := db.Acquire(ctx)
		if err != nil {
			return nil, s.wrap("acquiring a connection for the purge turn", err)
		}
		session = &pgxSession{conn: c.Conn(), pooled: c}
	case *pgx.Conn, *pgxpool.Conn:
		conn, release, err := s.pin(ctx)
		if err != nil {
			return nil, s.wrap("acquiring a connection", err)
		}
		session, err = ownConn(ctx, conn)
		release()
		if err != nil {
			return nil, s.wrap("taking the purge turn", err)
		}
	default:
		return nil, fmt.Errorf("inbox: %w: a purge turn needs a *pgxpool.Pool, a *pgx.Conn or a *pgxpool.Conn, not a %T", errors.ErrUnsupported, s.db)
	}
	return takeTurn(ctx, session, s.pooler, s.sql, idle, s.wrap)
}

// TakePurgeTurn implements contract.PurgeTurns, as Store's: over a *sql.DB the turn
// takes one of its connections and closes it when the turn ends; over a *sql.Conn of
// pgx's stdlib driver it opens a connection of its own, of that connection's config.
// A *sql.Conn of another driver cannot lend one: it fails with errors.ErrUnsupported.
func (s *SQLStore) TakePurgeTurn(ctx context.Context, idle time.Duration) (contract.PurgeTurn, error) {
	var session turnSession
	switch db := s.db.(type) {
	case *sql.DB:
		c, err := db.Conn(ctx)
		if err != nil {
			return nil, s.wrap("acquiring a connection for the purge turn", err)
		}
		session = &sqlSession{conn: c}
	case *sql.Conn:
		err := db.Raw(func(dc any) error {
			pc, ok := dc.(interface{ Conn() *pgx.Conn })
			if !ok {
				return fmt.Errorf("inbox: %w: a purge turn over a *sql.Conn needs pgx's stdlib driver, to open a connection of its own: give the retention a store over a *sql.DB", errors.ErrUnsupported)
			}
			var err error
			session, err = ownConn(ctx, pc.Conn())
			return err
		})
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, err
		}
		if err != nil {
			return nil, s.wrap("taking the purge turn", err)
		}
	default:
		return nil, fmt.Errorf("inbox: %w: a purge turn needs a *sql.DB or a *sql.Conn, not a %T", errors.ErrUnsupported, s.db)
	}
	return takeTurn(ctx, session, s.pooler, s.sql, idle, s.wrap)
}
