package contract

import (
	"context"
	"strconv"
	"time"
)

// Offset mode: for a consumer of a log that delivers each partition in order, one
// message at a time (Kafka), the inbox keeps no key per message but one row per
// consumer, topic and partition holding the offset of the next record to process. A
// record below it is a duplicate; a record at or past it is new, and the row moves past
// it in the handler's transaction, in one statement. See Config.Position and
// Inbox.ProcessOffsets.

// NoLeaderEpoch is Position.LeaderEpoch when the client does not report it.
const NoLeaderEpoch int32 = -1

// Position is where a record sits in a partitioned log.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
	// LeaderEpoch is the partition leader epoch the record was written in (franz-go's
	// Record.LeaderEpoch), which only grows along a partition's log: a record whose
	// epoch does not fit the stored one's is from another log. Kafka's epochs start at
	// 0: set NoLeaderEpoch (-1) when the client does not report it (Sarama does not).
	LeaderEpoch int32
	// Timestamp is the record's time; the zero time when unknown.
	Timestamp time.Time
	// TopicID identifies the topic across its deletion and re-creation (Kafka 3.1+,
	// franz-go's FetchTopic.TopicID); nil when unknown.
	TopicID []byte
}

// String returns "topic/partition/offset", the key offset mode reports the record by
// (in observations and logs).
func (p Position) String() string {
	return p.Topic + "/" + strconv.FormatInt(int64(p.Partition), 10) + "/" + strconv.FormatInt(p.Offset, 10)
}

// OffsetStore is the optional interface of a Store that keeps offset mode's positions:
// per consumer, topic and partition, the offset of the next record to process, moved
// forward in the handler's transaction. Config.Position and Inbox.ProcessOffsets need
// it; the SQL stores (mysqlstore except on Vitess)
// implement it. It is found with a type assertion, as BatchStore is.
type OffsetStore interface {
	Store

	// ClaimOffsets begins a transaction and, for each span (one per partition, sorted by
	// topic and partition, so that overlapping claims lock rows in the same order),
	// moves the partition's stored offset to span.Last+1 in one statement, if every
	// record of the span is past it: the stored next offset is at most span.First, the
	// span's first leader epoch is not older than the stored one, and the topic IDs
	// agree (each check only when both sides are known). A partition without a row gets
	// one. Otherwise it changes nothing and reports what it holds. Either way the row
	// stays locked until the transaction ends: a concurrent claim of the same partition
	// (a rebalance handing it over while the old owner still works) waits for it, and
	// then sees the offset it committed. A wait the database gave up on is an error
	// wrapping ErrContended.
	//
	// The transaction is returned open even when nothing moved; the caller ends it.
	// Its Commit stores output, when not nil, with the last span's partition, where the
	// middleware finds it for a duplicate of that partition's last record.
	ClaimOffsets(ctx context.Context, consumer string, spans []OffsetSpan) (OffsetClaim, error)

	// ClaimOffsetsIn is ClaimOffsets inside tx, a transaction the caller began and will
	// end itself (the store's transaction type, as for Store.ClaimIn).
	ClaimOffsetsIn(ctx context.Context, tx any, consumer string, spans []OffsetSpan) (OffsetClaim, error)

	// Offsets returns the stored offsets of consumer (of every consumer when it is
	// empty), sorted by consumer, topic and partition.
	Offsets(ctx context.Context, consumer string) ([]PartitionOffset, error)

	// SetOffset sets the stored next offset of one partition, for an operator who
	// resets it on purpose (a topic re-created, a replay wanted): records from next on
	// are then new. A negative next deletes the row, so that the next record the
	// broker delivers is new whatever its offset. It reports whether a row was there.
	SetOffset(ctx context.Context, consumer, topic string, partition int32, next int64) (bool, error)

	// VerifyOffsets checks that the offsets table exists with the columns the store
	// needs, and returns an error wrapping ErrNoTable, saying how to create it, when it
	// does not.
	VerifyOffsets(ctx context.Context) error
}

// OffsetSpan is what ClaimOffsets claims of one partition: the records from First to
// Last, in order.
type OffsetSpan struct {
	Topic     string
	Partition int32
	// First and Last are the offsets of the span's first and last records.
	First, Last int64
	// FirstEpoch and LastEpoch are their leader epochs; NoLeaderEpoch when unknown.
	FirstEpoch, LastEpoch int32
	// MaxTimestamp is the latest record time of the span, in Unix milliseconds; -1 when
	// unknown.
	MaxTimestamp int64
	// TopicID is the topic's ID; nil when unknown.
	TopicID []byte
}

// OffsetClaim is the verdict of OffsetStore.ClaimOffsets, one PartitionState per span,
// in order.
type OffsetClaim struct {
	// Tx is the open transaction holding the partitions' rows.
	Tx         Tx
	Partitions []PartitionState
}

// PartitionState is what ClaimOffsets found for one span.
type PartitionState struct {
	// Moved reports that the store moved the partition's offset past the span: every
	// record of it is new. The other fields are then unset.
	Moved bool
	// Next is the stored next offset: the span's records below it are duplicates.
	Next int64
	// LeaderEpoch is the leader epoch of the record at Next-1; NoLeaderEpoch when
	// unknown.
	LeaderEpoch int32
	// MaxTimestamp is the latest record time processed, Unix milliseconds; -1 when
	// unknown.
	MaxTimestamp int64
	// TopicID is the topic's ID as stored; nil when unknown.
	TopicID []byte
	// Output is what the handler of the record at Next-1 produced, stored by the
	// middleware; nil when none.
	Output []byte
}

// PartitionOffset is one stored offset, as OffsetStore.Offsets lists it.
type PartitionOffset struct {
	Consumer  string
	Topic     string
	Partition int32
	// Next is the offset of the next record to process: records below it are
	// duplicates.
	Next int64
	// LeaderEpoch is the leader epoch of the record at Next-1; NoLeaderEpoch when
	// unknown.
	LeaderEpoch int32
	// MaxTimestamp is the latest record time processed; the zero time when unknown.
	MaxTimestamp time.Time
	// TopicID is the topic's ID; nil when unknown.
	TopicID []byte
	// UpdatedAt is when the row was last written.
	UpdatedAt time.Time
}
