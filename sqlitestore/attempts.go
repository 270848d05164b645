package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Attempts (inbox.Config.MaxAttempts, ADR 82): one row per attempt, committed before
// the claim's transaction begins, deleted when the attempt ends; while it runs, its
// process holds the attempt's byte of the lock file (running). A claim counts the key's
// rows whose attempt does not run: their process died.

// startAttempt starts rec's attempt, if it has one, on the lease's connection: its
// byte locked first, so that its row is never visible without the lock, then the row
// inserted and committed, in a transaction that also ends the attempts whose end is
// pending. When it fails nothing is started.
func (s *Store) startAttempt(ctx context.Context, l *lease, rec contract.Record) error {
	if rec.Attempt == "" {
		return nil
	}
	r := l.info.running
	if err := r.start(rec.Attempt, rec.Consumer, rec.Key); err != nil {
		return fmt.Errorf("inbox: starting the attempt: %w", err)
	}
	tx, err := l.begin(ctx)
	if err != nil {
		r.end(rec.Attempt)
		return s.wrap("starting the attempt", err)
	}
	var ended []string
	_, err = tx.ExecContext(ctx, s.sql.startAttempt, rec.Consumer, rec.Key, rec.Attempt, now())
	if err == nil {
		ended, err = s.endPending(ctx, tx, r)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		r.end(rec.Attempt)
		return joinErrors(s.wrap("starting the attempt", err), rollback(tx))
	}
	r.end(ended...)
	return nil
}

// unfinished counts, in tx, which holds rec's key and the write lock, the key's other
// attempts that do not run: their process died, or abandoned them (a panic).
func (s *Store) unfinished(ctx context.Context, tx *sql.Tx, r *running, rec contract.Record) (int, error) {
	rows, err := tx.QueryContext(ctx, s.sql.attemptsOf, rec.Consumer, rec.Key, rec.Attempt)
	if err != nil {
		return 0, s.wrap("counting the attempts", err)
	}
	var tokens []string
	for rows.Next() {
		var token string
		if err := rows.Scan(&token); err != nil {
			_ = rows.Close()
			return 0, s.wrap("counting the attempts", err)
		}
		tokens = append(tokens, token)
	}
	if err := rows.Err(); err != nil {
		return 0, s.wrap("counting the attempts", err)
	}
	n := 0
	for _, token := range tokens {
		live, err := r.isRunning(token)
		if err != nil {
			return 0, fmt.Errorf("inbox: counting the attempts: %w", err)
		}
		if !live {
			n++
		}
	}
	return n, nil
}

// endPending deletes, in tx, the rows of this process's attempts whose end is pending,
// and returns their tokens, to end once tx committed.
func (s *Store) endPending(ctx context.Context, tx *sql.Tx, r *running) ([]string, error) {
	var tokens []string
	for token, a := range r.pendingEnds() {
		if _, err := tx.ExecContext(ctx, s.sql.endAttempt, a.consumer, a.key, token); err != nil {
			return nil, err
		}
		tokens = append(tokens, token)
	}
	return tokens, nil
}

// EndAttempt implements inbox.Store: it deletes the row of an attempt this process
// started and has not ended, in a transaction of its own, and ends it. Anything else
// (no attempt, one that ended, one that never started, one beside a joined transaction,
// which SQLite never starts) needs nothing. When the row cannot be deleted, the attempt
// stays marked as running, so that nobody counts it, until a later write deletes it.
func (s *Store) EndAttempt(ctx context.Context, rec contract.Record) error {
	if rec.Attempt == "" {
		return nil
	}
	info, err := s.info(ctx)
	if err != nil {
		return err
	}
	if !info.running.runsHere(rec.Attempt) {
		return nil
	}
	info.running.pend(rec.Attempt)
	return s.write(ctx, "ending the attempt", func(*sql.Tx) error { return nil }) // endPending deletes it
}
