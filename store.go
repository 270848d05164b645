package inbox

import "github.com/watermill-inbox/inbox/internal/contract"

// The contract between the inbox and its stores. The types are defined in
// internal/contract, below the core and the stores, so that the stores' packages
// (postgresstore, mysqlstore, sqlitestore, redisstore) implement it without importing
// this package, while this package keeps their constructors (NewPostgresStore,
// NewMySQLStore...) as its users' entry points. docs/architecture.md maps the folders.

// Store keeps inbox keys in a database, in the same transaction as the handler's writes:
// the contract between the inbox and its stores (its methods are documented in
// internal/contract). The inbox calls Claim, ClaimIn and EndAttempt; an application
// calls a store's constructor, CreateSchema, Forget, Stats and Verify, and purges with
// Purge or PurgeEvery. The stores are postgresstore (pgx and database/sql, also as
// NewPostgresStore and NewSQLPostgresStore), mysqlstore (MySQL, MariaDB, Vitess and TiDB,
// also as NewMySQLStore), sqlitestore and redisstore; the conformance suite in this
// module's tests is the contract's executable form.
type Store = contract.Store

// Record is what Store.Claim inserts: one key of one consumer. ClaimFromContext returns
// the record the inbox claimed for the handler's message.
type Record = contract.Record

// Claim is the verdict of Store.Claim: a duplicate, with what the first delivery stored,
// or an open transaction holding a new key.
type Claim = contract.Claim

// Tx is a transaction holding a claimed key: Handle is what handlers get from
// TxFromContext.
type Tx = contract.Tx

// Purged is what one Store.PurgeBatch deleted.
type Purged = contract.Purged

// ConsumerStats describes one consumer's keys.
type ConsumerStats = contract.ConsumerStats

// BatchStore is the optional interface of a Store that claims the keys of many messages
// of one consumer at once, in one transaction: Inbox.ProcessBatch needs it.
type BatchStore = contract.BatchStore

// BatchClaim is the verdict of BatchStore.ClaimBatch, one entry per record, in order.
type BatchClaim = contract.BatchClaim

// OffsetStore is the optional interface of a Store that keeps offset mode's positions:
// per consumer, topic and partition, the offset of the next record to process.
// Config.Position and Inbox.ProcessOffsets need it.
type OffsetStore = contract.OffsetStore

// OffsetSpan is what OffsetStore.ClaimOffsets claims of one partition: the records from
// First to Last, in order.
type OffsetSpan = contract.OffsetSpan

// OffsetClaim is the verdict of OffsetStore.ClaimOffsets, one PartitionState per span.
type OffsetClaim = contract.OffsetClaim

// PartitionState is what OffsetStore.ClaimOffsets found for one span.
type PartitionState = contract.PartitionState

// PartitionOffset is one stored offset, as OffsetStore.Offsets lists it.
type PartitionOffset = contract.PartitionOffset

// Position is where a record sits in a partitioned log (offset mode).
type Position = contract.Position

// NoLeaderEpoch is Position.LeaderEpoch when the client does not report it.
const NoLeaderEpoch = contract.NoLeaderEpoch

// AttemptCounter is an optional Store ability: how many attempts (Config.MaxAttempts) of
// each consumer have started and not ended. The table metrics (inboxprom, inboxotel)
// export it when the store has it.
type AttemptCounter = contract.AttemptCounter

// AttemptLister is an optional Store ability: the unfinished attempts
// (Config.MaxAttempts) with the time each started, per consumer and one by one, for an
// operator's page (inboxui).
type AttemptLister = contract.AttemptLister

// AttemptAge is one consumer's unfinished attempts: how many, and when the oldest
// started.
type AttemptAge = contract.AttemptAge

// Attempt is one unfinished attempt, as AttemptLister.Attempts lists it.
type Attempt = contract.Attempt

// ConsumerNeighbours is an optional Store ability: telling cheaply whether a consumer
// name is new on a table that holds other consumers' keys, so that the middleware warns
// once about a renamed handler.
type ConsumerNeighbours = contract.ConsumerNeighbours

// DefaultTable is the inbox table's default name. A store also uses the tables
// <name>_attempts (Config.MaxAttempts) and <name>_offsets (offset mode).
const DefaultTable = contract.DefaultTable

// MaxKeyLen is the longest key stored as it is; see StorableKey.
const MaxKeyLen = contract.MaxKeyLen

// AttemptConnWait bounds how long counting an attempt beside a joined transaction waits
// for a second connection of the store's pool (see Config.MaxAttempts).
const AttemptConnWait = contract.AttemptConnWait
