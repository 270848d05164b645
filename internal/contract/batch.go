package contract

import (
	"context"
)

// BatchStore is the optional interface of a Store that claims the keys of many messages
// of one consumer at once, in one transaction: Inbox.ProcessBatch needs it. A store
// implements it when its database lets it claim a batch in fewer round trips than a
// claim per message; postgresstore, mysqlstore, sqlitestore and redisstore do. As
// io.WriterTo to io.Writer, it is found with a type assertion, so the core Store stays
// small.
//
// The contract is Store.Claim's, for many keys: a key committed before is a duplicate;
// a key another transaction holds is waited for, then found committed (a duplicate) or
// claimed (that transaction rolled back); a wait the database gave up on is an error
// wrapping ErrContended, with nothing claimed. A duplicate is reported in the
// BatchClaim, never as an error. recs all have the same Consumer, their keys are
// distinct, storable (StorableKey) and sorted byte-wise: claiming them in that order
// keeps two overlapping batches from deadlocking.
type BatchStore interface {
	Store

	// ClaimBatch begins a transaction and inserts every key of recs in it, before the
	// handler runs. When at least one key is new, the returned BatchClaim holds the open
	// transaction, which commits or rolls back the new keys with the handler's writes;
	// when none is, the store ends its transaction and BatchClaim.Tx is nil.
	ClaimBatch(ctx context.Context, recs []Record) (BatchClaim, error)

	// ClaimBatchIn is ClaimBatch inside tx, a transaction the caller began and will end
	// itself (the store's transaction type, as for Store.ClaimIn). BatchClaim.Tx, when
	// not nil, neither commits nor rolls back.
	ClaimBatchIn(ctx context.Context, tx any, recs []Record) (BatchClaim, error)
}

// BatchClaim is the verdict of BatchStore.ClaimBatch, one entry per record, in order.
type BatchClaim struct {
	// Duplicate[i] reports that recs[i]'s key was committed before.
	Duplicate []bool
	// Fingerprint[i] is what the first delivery of a duplicate stored with its key (nil
	// for a new key, or when none was stored).
	Fingerprint [][]byte
	// Tx is the open transaction holding the new keys; nil when every key is a
	// duplicate. Its Commit stores no output: pass nil.
	Tx Tx
}
