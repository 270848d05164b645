package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// The database/sql stores' AttemptLister: the queries are each dialect's, and so is
// the form of a stored time (T: a time.Time, a formatted string, microseconds), which
// toTime turns into a time.Time.

// AttemptAges runs a query of (consumer, count, oldest start) rows on db.
func AttemptAges[T any](ctx context.Context, db DB, query string, toTime func(T) (time.Time, error)) ([]contract.AttemptAge, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []contract.AttemptAge
	for rows.Next() {
		var a contract.AttemptAge
		var oldest T
		if err := rows.Scan(&a.Consumer, &a.Unfinished, &oldest); err != nil {
			return nil, err
		}
		if a.Oldest, err = toTime(oldest); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// ListAttempts runs a query of (consumer, key, token, start) rows on db, with args.
func ListAttempts[T any](ctx context.Context, db DB, query string, toTime func(T) (time.Time, error), args ...any) ([]contract.Attempt, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []contract.Attempt
	for rows.Next() {
		var a contract.Attempt
		var started T
		if err := rows.Scan(&a.Consumer, &a.Key, &a.Token, &started); err != nil {
			return nil, err
		}
		if a.StartedAt, err = toTime(started); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// CheckAttemptLimit refuses a limit that is not positive.
func CheckAttemptLimit(limit int) error {
	if limit <= 0 {
		return fmt.Errorf("inbox: listing attempts: limit is %d: ask for at least one", limit)
	}
	return nil
}
