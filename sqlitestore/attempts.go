package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/watermill-inbox/inbox"
)

// besideJoined refuses to count attempts beside a transaction the message context
// carries: that transaction holds, or will take, the database's only write lock, so a
// count written on another connection would wait for it to end (ADR 82).
func besideJoined(ctx context.Context) error {
	if tx, _ := inbox.TxFromContext[any](ctx); tx != nil {
		return fmt.Errorf("inbox: counting the attempt: %w: on SQLite the joined transaction holds, or will take, the database's only write lock, so a count written beside it would wait for it to end; let the inbox begin the transaction (no inbox.ContextWithTx), or set MaxAttempts to 0", inbox.ErrAttemptsNeedConn)
	}
	return nil
}

// StartAttempt implements inbox.Store, in a short transaction of its own.
func (s *Store) StartAttempt(ctx context.Context, consumer, key string) (int, error) {
	if err := besideJoined(ctx); err != nil {
		return 0, err
	}
	var unfinished int
	err := s.write(ctx, "counting the attempt", func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, s.sql.startAttempt, consumer, key, now()).Scan(&unfinished)
	})
	return unfinished, err
}

// EndAttempt implements inbox.Store.
func (s *Store) EndAttempt(ctx context.Context, consumer, key string) error {
	if err := besideJoined(ctx); err != nil {
		return err
	}
	return s.write(ctx, "ending the attempt", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.sql.endAttempt, consumer, key)
		return err
	})
}
