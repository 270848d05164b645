package contract

import (
	"context"
	"time"
)

// AttemptCounter is an optional Store ability, found with a type assertion: how many
// attempts (Config.MaxAttempts) of each consumer have started and not ended, from the
// attempts table. The table metrics (inboxprom.TableCollector, inboxotel.TableGauges)
// export it when the store has it. the SQL stores implement
// it.
type AttemptCounter interface {
	// UnfinishedAttempts returns, per consumer, the attempts that started and have not
	// ended: running now, or whose process died (their rows stay until the purge). A
	// consumer without any is absent. Without MaxAttempts the map is empty.
	UnfinishedAttempts(ctx context.Context) (map[string]int64, error)
}

// ConsumerNeighbours is an optional Store ability, found with a type assertion: telling,
// cheaply (a few index lookups, never a scan), whether a consumer name is new on a table
// that holds other consumers' keys. The middleware uses it to warn once when a consumer
// name appears that has no keys while others have: a renamed handler (the consumer
// defaults to the Watermill handler name) processes again every message its old name
// processed. The SQL stores and TenantStore
// (in the tenant of the message) implement it.
type ConsumerNeighbours interface {
	// NeighbourConsumers returns nil when consumer has keys in the store, or when no
	// other consumer has; otherwise up to two other consumers that have keys: the
	// names next to consumer in byte order, which is where a renamed one sorts when the
	// rename kept its beginning ("billing" for "billing-v2").
	NeighbourConsumers(ctx context.Context, consumer string) ([]string, error)
}

// AttemptConnWait bounds how long counting an attempt beside a joined transaction waits
// for a second connection of the store's pool (see Config.MaxAttempts).
const AttemptConnWait = 5 * time.Second

// AttemptChecker is an optional Store ability: telling, when inbox.New is called, that
// the store cannot count attempts (on its handle, or behind a transaction pooler), so
// that New refuses Config.MaxAttempts at once.
type AttemptChecker interface {
	CheckAttempts(ctx context.Context) error
}

// StoredReader is a store that reads a key's stored row outside any transaction, in one
// round trip: what a committed key's duplicate gets. found is false when no row is
// committed for the key (never processed, forgotten, purged, or still in flight).
type StoredReader interface {
	ReadStored(ctx context.Context, rec Record) (claim Claim, found bool, err error)
}

// AttemptLister is an optional Store ability, found with a type assertion: the
// unfinished attempts (Config.MaxAttempts) with the time each started, for a person
// looking at what is in flight and for how long (inboxui's page). An unfinished attempt
// is running now or its process died: its row stays until it ends or the purge deletes
// it. PostgresStore, SQLPostgresStore, MySQLStore, sqlitestore and TenantStore implement
// it; the Redis store keeps no start time with its attempts and does not.
type AttemptLister interface {
	// AttemptAges returns, for each consumer that has unfinished attempts, how many
	// there are and when the oldest started, sorted by consumer: one GROUP BY over the
	// attempts table, which holds only attempts in flight and those that died.
	AttemptAges(ctx context.Context) ([]AttemptAge, error)
	// Attempts returns at most limit unfinished attempts of consumer, the oldest first
	// (then by key and token). limit must be positive.
	Attempts(ctx context.Context, consumer string, limit int) ([]Attempt, error)
}

// AttemptAge is one consumer's unfinished attempts, as AttemptLister.AttemptAges
// returns them.
type AttemptAge struct {
	Consumer   string
	Unfinished int64
	// Oldest is when the oldest of them started.
	Oldest time.Time
}

// Attempt is one unfinished attempt, as AttemptLister.Attempts lists it.
type Attempt struct {
	Consumer string
	Key      string
	// Token is the attempt's random token (Record.Attempt).
	Token string
	// StartedAt is when the attempt started, by the database's clock.
	StartedAt time.Time
}
