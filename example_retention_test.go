package inbox_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
)

// Every replica of a service runs the same Retention: at each interval one of them
// takes the purge turn of the table and purges; the others find it held and skip. A
// replica killed mid-purge loses the turn with its connection, and another takes it at
// its next interval.
func ExampleNewRetention() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	store, _ := inbox.NewPostgresStore(pool, inbox.PostgresConfig{})
	r, err := inbox.NewRetention(inbox.RetentionConfig{
		Store:    store,
		Interval: time.Hour,
		Purge:    inbox.PurgeConfig{OlderThan: 30 * 24 * time.Hour, MinRetention: 14 * 24 * time.Hour},
		Observer: inbox.RetentionObserverFunc(func(_ context.Context, run inbox.RetentionRun) {
			log.Printf("purge %s: %d keys in %v", run.Result(), run.Keys, run.Duration)
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = r.Run(ctx) }() // until ctx ends
}
