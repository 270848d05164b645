package inbox

import (
	"context"
	"time"
)

// Store keeps inbox keys in a database, in the same transaction as the handler's writes.
// The middleware is the same for every store: what differs between databases lives
// behind this interface. The stores in this package are PostgresStore (pgx),
// SQLPostgresStore and MySQLStore (database/sql); the conformance suite in this module's
// tests is the contract's executable form.
type Store interface {
	// Claim begins a transaction and inserts rec's key in it, before the handler runs.
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
	// on Commit but neither commits nor rolls back.
	ClaimIn(ctx context.Context, tx any, rec Record) (Claim, error)

	// StartAttempt records, outside any transaction, that processing of the key starts,
	// and returns how many earlier attempts started without ending: attempts that neither
	// committed nor called EndAttempt, because the process died during them.
	StartAttempt(ctx context.Context, consumer, key string) (unfinished int, err error)

	// EndAttempt records that an attempt started by StartAttempt ended without a commit
	// but cleanly: the handler returned an error and the transaction was rolled back.
	EndAttempt(ctx context.Context, consumer, key string) error

	// Forget deletes one key (and its attempt count), so that the next delivery of that
	// message is processed again. It reports whether the key existed.
	Forget(ctx context.Context, consumer, key string) (bool, error)

	// PurgeBatch deletes, in one short transaction of its own, at most limit keys
	// processed before the cutoff and at most limit attempt counts started before it,
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

	// pos is, in offset mode, the message's position, which the inbox claims in its
	// partition's row instead of the key (Key is then pos.String()).
	pos *Position
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
}

// Tx is a transaction holding a claimed key.
type Tx interface {
	// Handle returns the transaction the handler writes through: pgx.Tx for the pgx
	// store, *sql.Tx for the database/sql stores. Handlers get it from TxFromContext.
	Handle() any
	// Commit stores output (nil when the handler produced nothing) with the key and
	// commits. A joined transaction (Store.ClaimIn) only gets the output stored. If the
	// handler ended the transaction itself, Commit returns an error wrapping ErrTxDone.
	Commit(ctx context.Context, output []byte) error
	// Rollback rolls back, removing the key with the handler's writes, even when ctx is
	// cancelled. It does nothing for a joined transaction, or once the transaction ended.
	Rollback(ctx context.Context) error
}

// Purged is what one Store.PurgeBatch deleted.
type Purged struct {
	Keys     int64 // keys, with their stored output
	Attempts int64 // attempt counts (Config.MaxAttempts)
}

// ConsumerStats describes one consumer's keys.
type ConsumerStats struct {
	Consumer string
	Keys     int64
	Oldest   time.Time
}
