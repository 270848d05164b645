package contract

import (
	"context"
	"errors"
	"time"
)

// PurgeTurns is an optional Store ability, found with a type assertion: a turn at
// purging the store's table that one holder at a time gets, from a lock the database
// gives (the operating system's, for SQLite) and drops when the holder's process dies.
// inbox.Retention takes it before each run, so that a fleet of replicas purges one at a
// time. postgresstore (both stores), mysqlstore, sqlitestore and redisstore implement
// it, and TenantStore in the tenant of the context.
type PurgeTurns interface {
	// TakePurgeTurn tries to take the purge turn of the store's table, without waiting:
	// it returns (nil, nil) when another holder has it. The turn holds a session of its
	// own until Release, on which its PurgeBatch runs: a holder whose session is lost
	// (its process killed, its connection broken) loses the turn at once and cannot
	// delete another batch, so two turns never overlap. idle is the longest the holder
	// means to stay silent on the session between two batches (PurgeConfig.Pause);
	// where the database can end an idle session (PostgreSQL 14 and later, MySQL,
	// MariaDB, TiDB), it ends a turn silent for IdleMargin longer, so that a holder
	// frozen or cut off (its host down) loses the turn too.
	TakePurgeTurn(ctx context.Context, idle time.Duration) (PurgeTurn, error)
}

// PurgeTurn is a purge turn held: see PurgeTurns.
type PurgeTurn interface {
	// PurgeBatch is Store.PurgeBatch on the turn's session: it fails once the turn is
	// lost.
	PurgeBatch(ctx context.Context, before time.Time, limit int) (Purged, error)
	// Release gives the turn back and closes its session. It runs whatever ctx's state,
	// and is safe to call more than once.
	Release(ctx context.Context) error
}

// IdleMargin is what a purge turn may stay silent beyond the idle its holder declared
// (PurgeTurns.TakePurgeTurn) before the database ends it, where it can.
const IdleMargin = 30 * time.Second

// ErrPurgeTurnBehindPooler means a purge turn was asked of a PostgreSQL store whose
// connections go through a pooler that moves a client's transactions between server
// connections (PgBouncer in transaction mode): the turn is a session lock, which such a
// pooler leaves on a server connection that other clients then use, so that it would
// neither follow the holder nor go when the holder dies. Give the retention a store of
// its own, on the same table, connected to PostgreSQL directly (or through a pooler in
// session mode). Permanent: it fails the same way until the deployment changes.
var ErrPurgeTurnBehindPooler = errors.New("purge turn behind a transaction pooler")

// PurgeCounter is an optional Store ability, found with a type assertion: what a purge
// would delete, for `inbox purge --dry-run`. The SQL stores count it, redisstore (whose
// keys expire by themselves) counts nothing, and TenantStore counts in the tenant of
// the context.
type PurgeCounter interface {
	// CountPurge counts the keys processed before the cutoff and the attempt rows
	// started before it: what purging with that cutoff would delete. It reads the
	// indexes on processed_at and started_at, and changes nothing.
	CountPurge(ctx context.Context, before time.Time) (Purged, error)
}
