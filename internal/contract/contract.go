package contract

import (
	"context"
	"time"
)

// Store keeps inbox keys in a database, in the same transaction as the handler's writes.
// The middleware is the same for every store: what differs between databases lives
// behind this interface. It is the contract between the inbox and its stores, for those
// who write a store: the inbox calls these methods, and an application calls only a
// store's constructor, CreateSchema, Forget and Stats (and Purge, PurgeEvery). The stores are postgresstore, mysqlstore,
// sqlitestore and redisstore; the conformance suite in the root's tests is the
// contract's executable form.
type Store interface {
	// Claim begins a transaction and inserts rec's key in it, before the handler runs.
	//
	// A Record with an Attempt (Config.MaxAttempts) first starts that attempt: committed,
	// outside the claim's transaction, so that it survives a crash, and marked as running
	// until it ends or its process dies (on the SQL stores, a session lock taken before
	// the attempt's row is visible). A new key's Claim then reports in Unfinished the
	// key's earlier attempts that started, never ended and are no longer running: their
	// process died. A duplicate's Claim ends its attempt; a failed Claim leaves it to
	// EndAttempt. Tx.Commit and Tx.Rollback end it, Tx.Abandon leaves it unfinished.
	//
	// A new key returns a Claim with an open Tx; the caller runs the handler in it and
	// ends it with Tx.Commit or Tx.Rollback, which also removes the key.
	// A committed key returns Claim.Duplicate, with what the first delivery stored, and no
	// open transaction. A key inserted by a transaction still open makes Claim wait on
	// that transaction's index entry: it then reports a duplicate if the other committed,
	// or claims the key if it rolled back.
	//
	// A duplicate is reported in the Claim, never as an error. An error means no verdict:
	// the caller must not ack the message. A wait the database gave up on (lock timeout,
	// deadlock, serialization failure) is an error wrapping ErrContended.
	Claim(ctx context.Context, rec Record) (Claim, error)

	// ClaimIn is Claim inside tx, a transaction the caller began and will end itself (the
	// middleware joins a transaction found in the message context). tx must be the
	// store's transaction type, the one Tx.Handle returns. The returned Tx stores output
	// on Commit but neither commits nor rolls back. An Attempt's row is written on
	// another connection than tx's (see Config.MaxAttempts), and the attempt ends when
	// the handler returns, whatever the owner does with tx later: Tx.Rollback ends it,
	// and after Tx.Commit the caller does, with EndAttempt.
	ClaimIn(ctx context.Context, tx any, rec Record) (Claim, error)

	// EndAttempt ends rec.Attempt, an attempt Claim or ClaimIn started, when its end is
	// uncertain: the claim failed, or Tx.Commit or Tx.Rollback returned an error (the
	// connection may have broken after the server ran them); and, beside a joined
	// transaction (ctx carries it), after Tx.Commit. It is safe to call more than once,
	// after an end that went through, and for an attempt that never started. It does
	// nothing for a Record without an Attempt.
	EndAttempt(ctx context.Context, rec Record) error

	// Forget deletes one key (and its attempts), so that the next delivery of that
	// message is processed again. It reports whether the key existed.
	Forget(ctx context.Context, consumer, key string) (bool, error)

	// PurgeBatch deletes, in one short transaction of its own, at most limit keys
	// processed before the cutoff and at most limit attempt rows started before it,
	// and returns how many of each it deleted: a purge is done when both are below
	// limit.
	PurgeBatch(ctx context.Context, before time.Time, limit int) (Purged, error)

	// Stats returns the number of keys and the oldest key's time, per consumer.
	Stats(ctx context.Context) ([]ConsumerStats, error)

	// Verify checks that the store's tables exist with the columns it needs, and returns
	// an error wrapping ErrNoTable, saying how to create them, when they do not.
	Verify(ctx context.Context) error
}

// Record is what Store.Claim inserts: one key of one consumer.
type Record struct {
	Consumer string
	Key      string
	// Fingerprint identifies the message's content (see Config.Fingerprint). It may be nil.
	Fingerprint []byte
	// Attempt is a random token per delivery when attempts are counted
	// (Config.MaxAttempts > 0), and "" otherwise. Claim starts the attempt.
	Attempt string

	// pos is, in offset mode, the message's position, which the inbox claims in its
	// partition's row instead of the key (Key is then pos.String()).
	Position *Position

	// Tenant is the tenant the key was claimed in (the call's TenantFromContext), in the
	// claim a handler gets (ClaimFromContext): the same key in two tenants is two
	// messages. A store never sees it: the inbox leaves it empty in the records it
	// passes to stores, which stay unaware of tenants (a TenantStore routes by the
	// context).
	Tenant string
}

// Claim is the verdict of Store.Claim.
type Claim struct {
	// Duplicate reports that the key was committed before. Then Tx is nil and Fingerprint
	// and Output hold what the first delivery stored.
	Duplicate bool
	// Tx is the open transaction that holds a new key.
	Tx          Tx
	Fingerprint []byte
	Output      []byte
	// Unfinished is, for a new key whose Record has an Attempt, how many earlier
	// attempts of the key started, never ended and are no longer running: their process
	// died during them. Attempts of concurrent deliveries that are still running (waiting
	// on the key, or between their start and their claim) are not counted.
	Unfinished int
}

// Tx is a transaction holding a claimed key.
type Tx interface {
	// Handle returns the transaction the handler writes through: pgx.Tx for the pgx
	// store, *sql.Tx for the database/sql stores. Handlers get it from TxFromContext.
	Handle() any
	// Commit stores output (nil when the handler produced nothing) with the key and
	// commits, ending the claim's attempt with the key. A joined transaction
	// (Store.ClaimIn) only gets the output stored: its owner commits later, and the
	// caller ends the attempt with EndAttempt when the handler returns. If the handler
	// ended the transaction itself, Commit returns an error wrapping ErrTxDone.
	Commit(ctx context.Context, output []byte) error
	// Rollback rolls back, removing the key with the handler's writes, even when ctx is
	// cancelled, and ends the claim's attempt: a clean failure, which MaxAttempts never
	// counts. For a joined transaction it only ends the attempt. Once the transaction
	// ended, it does nothing.
	Rollback(ctx context.Context) error
	// Abandon is Rollback without ending the attempt, which then counts as one whose
	// process died: for a handler that panicked (the process may be in an unknown
	// state).
	Abandon(ctx context.Context) error
}

// Purged is what one Store.PurgeBatch deleted.
type Purged struct {
	Keys     int64 // keys, with their stored output
	Attempts int64 // attempt rows (Config.MaxAttempts)
}

// ConsumerStats describes one consumer's keys.
type ConsumerStats struct {
	Consumer string
	Keys     int64
	Oldest   time.Time
}
