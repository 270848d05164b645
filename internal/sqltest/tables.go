package sqltest

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/watermill-inbox/inbox"
)

// CountingStore is a real store that counts its Stats calls: the samples that the table
// metrics of inboxprom and inboxotel take.
type CountingStore struct {
	inbox.Store
	Samples atomic.Int32
}

// Stats counts the call and asks the real store.
func (s *CountingStore) Stats(ctx context.Context) ([]inbox.ConsumerStats, error) {
	s.Samples.Add(1)
	return s.Store.Stats(ctx)
}

// UnfinishedAttempts passes the real store's ability on (an embedded inbox.Store hides
// it).
func (s *CountingStore) UnfinishedAttempts(ctx context.Context) (map[string]int64, error) {
	return s.Store.(inbox.AttemptCounter).UnfinishedAttempts(ctx)
}

// KeyAnHourOld moves the processed_at of consumer's key in table an hour back.
func (d Database) KeyAnHourOld(t testing.TB, db *sql.DB, table, consumer, key string) {
	t.Helper()
	back := `UPDATE ` + d.Quote(table) + ` SET processed_at = now() - interval '1 hour' WHERE consumer = $1 AND key = $2`
	if d.Dialect == MySQL {
		back = "UPDATE " + d.Quote(table) + " SET processed_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE `consumer` = ? AND `key` = ?"
	}
	res, err := db.ExecContext(context.Background(), back, consumer, key)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("moving %s's key %s an hour back changed %d rows (%v), not 1", consumer, key, n, err)
	}
}

// AbandonAttempt starts an attempt of consumer's key whose handler panics: it never
// ends, as a process that crashed mid-handler leaves it. Process lets the panic through.
func AbandonAttempt(ctx context.Context, t testing.TB, ib *inbox.Inbox, consumer, key string) {
	t.Helper()
	got := func() (r any) {
		defer func() { r = recover() }()
		_, _ = ib.Process(ctx, consumer, key, func(context.Context) error { panic("handler bug") })
		return nil
	}()
	if got != "handler bug" {
		t.Fatalf("Process of a handler that panics: the panic came back as %v", got)
	}
}
