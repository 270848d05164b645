package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Claim implements inbox.Store. In this process's turn at the write lock (the gate), on
// a connection of its own, it starts rec's attempt when there is one (startAttempt),
// then begins the claim's transaction and inserts the key first.
func (s *Store) Claim(ctx context.Context, rec contract.Record) (contract.Claim, error) {
	l, err := s.enter(ctx, "claiming the key")
	if err != nil {
		return contract.Claim{}, err
	}
	if err := s.startAttempt(ctx, l, rec); err != nil {
		return contract.Claim{}, joinErrors(err, l.restore(ctx, l.conn), release(l))
	}
	tx, err := l.begin(ctx)
	if err != nil {
		l.info.running.pend(rec.Attempt)
		return contract.Claim{}, joinErrors(s.wrap("beginning the transaction", err), l.restore(ctx, l.conn), release(l))
	}
	t := &inboxTx{s: s, tx: tx, rec: rec, lease: l}
	c, err := s.claim(ctx, t)
	switch {
	case err != nil:
		// The attempt's row stays until EndAttempt (or a later write) deletes it.
		l.info.running.pend(rec.Attempt)
		return contract.Claim{}, joinErrors(err, rollback(tx), release(l))
	case c.Duplicate:
		// The duplicate ends its attempt with the claim's transaction, which holds the
		// write lock, and so cannot meet another writer.
		return c, t.end(ctx, "ending the duplicate's attempt", nil)
	}
	return c, nil
}

// release releases a lease, as an error-free step of joinErrors.
func release(l *lease) error {
	l.release()
	return nil
}

// ClaimIn implements inbox.Store; tx must be a *sql.Tx on the same database file, from
// any handle. It takes the database's write lock if tx does not hold it yet (begin it
// with _txlock=immediate so that it does from its BEGIN: a deferred transaction that
// read before the claim gets SQLITE_BUSY, as inbox.ErrContended, if another writer
// committed since). A Record with an Attempt is refused with inbox.ErrAttemptsNeedConn:
// the joined transaction holds, or will take, the database's only write lock, so an
// attempt's row written beside it would wait for it to end (ADR 82).
func (s *Store) ClaimIn(ctx context.Context, tx any, rec contract.Record) (contract.Claim, error) {
	sqlTx, ok := tx.(*sql.Tx)
	if !ok {
		return contract.Claim{}, fmt.Errorf("inbox: the transaction in the context is a %T; sqlitestore joins only a *sql.Tx", tx)
	}
	if rec.Attempt != "" {
		return contract.Claim{}, fmt.Errorf("inbox: counting the attempt: %w: on SQLite the joined transaction holds, or will take, the database's only write lock, so an attempt written beside it would wait for it to end; let the inbox begin the transaction (no inbox.ContextWithTx), or set MaxAttempts to 0", contract.ErrAttemptsNeedConn)
	}
	if err := ctx.Err(); err != nil {
		return contract.Claim{}, fmt.Errorf("inbox: claiming the key: %w", err)
	}
	return s.claim(ctx, &inboxTx{s: s, tx: sqlTx, rec: rec})
}

// claim inserts t's key in t's transaction and, only when it was there already, reads
// what the first delivery stored: the insert took the write lock, so that read sees the
// latest commit. For a new key with an attempt it counts the key's attempts whose
// process died: the key's holder has the write lock, so no attempt ends or starts
// while it reads. For a joined transaction LockTimeout is set and restored around the
// insert here; the store's own had it set on its connection (enter).
func (s *Store) claim(ctx context.Context, t *inboxTx) (contract.Claim, error) {
	tx, rec := t.tx, t.rec
	bound := t.lease
	if bound == nil && s.cfg.LockTimeout > 0 {
		bound = &lease{}
		if err := tx.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&bound.saved); err != nil {
			return contract.Claim{}, s.wrap("reading busy_timeout", err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, boundMillis(ctx, s.cfg.LockTimeout))); err != nil {
			return contract.Claim{}, joinErrors(s.wrap("setting busy_timeout", err), bound.restore(ctx, tx))
		}
	}
	var res sql.Result
	var err error
	if rec.Attempt != "" {
		// A clean failure rolls back to here and deletes the attempt's row in the same
		// transaction, still holding the write lock (inboxTx.Rollback).
		_, err = tx.ExecContext(ctx, `SAVEPOINT inbox_claim`)
	}
	if err == nil {
		res, err = tx.ExecContext(ctx, s.sql.insert, rec.Consumer, rec.Key, now(), rec.Fingerprint)
	}
	if bound != nil {
		if restoreErr := bound.restore(ctx, tx); restoreErr != nil && err == nil {
			return contract.Claim{}, s.wrap("restoring busy_timeout", restoreErr)
		}
	}
	if err != nil {
		return contract.Claim{}, s.wrap("inserting the key", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return contract.Claim{}, s.wrap("inserting the key", err)
	}
	if n == 1 {
		c := contract.Claim{Tx: t}
		if rec.Attempt != "" {
			if c.Unfinished, err = s.unfinished(ctx, tx, t.lease.info.running, rec); err != nil {
				return contract.Claim{}, err
			}
		}
		return c, nil
	}
	c := contract.Claim{Duplicate: true}
	if err := tx.QueryRowContext(ctx, s.sql.stored, rec.Consumer, rec.Key).Scan(&c.Fingerprint, &c.Output); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return contract.Claim{}, fmt.Errorf("inbox: the key vanished while being claimed: %w", contract.ErrContended)
		}
		return contract.Claim{}, s.wrap("reading the stored key", err)
	}
	return c, nil
}
