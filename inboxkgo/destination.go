package inboxkgo

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Destination takes the records Run skips (Config.OnError's Skip): a dead-letter topic
// (ToTopic), a log (ToLog), a store of your own.
type Destination interface {
	// Accept takes a skipped record and the reason it was skipped. It returns nil once
	// the record is safe where it goes: only then does Run move the offsets past it. An
	// error keeps the record: the batch is polled again after a backoff, and decided
	// again. A process that dies between Accept and the batch's commit gives the record
	// to Accept again: it gets each skipped record at least once.
	Accept(ctx context.Context, r *kgo.Record, reason error) error
}

// DestinationFunc adapts a function to Destination.
type DestinationFunc func(ctx context.Context, r *kgo.Record, reason error) error

// Accept implements Destination.
func (f DestinationFunc) Accept(ctx context.Context, r *kgo.Record, reason error) error {
	return f(ctx, r, reason)
}

// The headers ToTopic adds to a skipped record.
const (
	HeaderSkipReason    = "inbox_skip_reason"    // why it was skipped: the error's text
	HeaderSkipTopic     = "inbox_skip_topic"     // where it was: its topic,
	HeaderSkipPartition = "inbox_skip_partition" // partition
	HeaderSkipOffset    = "inbox_skip_offset"    // and offset
)

// ToTopic returns a Destination that produces each skipped record to topic through cl
// (a client of your own, which may be the consumer's), with its key, value and headers,
// and the Header* headers saying why and whence; Accept returns once the broker acked
// it (ProduceSync).
func ToTopic(cl *kgo.Client, topic string) Destination {
	return DestinationFunc(func(ctx context.Context, r *kgo.Record, reason error) error {
		headers := append(append([]kgo.RecordHeader(nil), r.Headers...),
			kgo.RecordHeader{Key: HeaderSkipReason, Value: []byte(reason.Error())},
			kgo.RecordHeader{Key: HeaderSkipTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderSkipPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: HeaderSkipOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))})
		out := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: headers, Timestamp: r.Timestamp}
		if err := cl.ProduceSync(ctx, out).FirstErr(); err != nil {
			return fmt.Errorf("inboxkgo: producing the skipped record %s/%d/%d to %s: %w", r.Topic, r.Partition, r.Offset, topic, err)
		}
		return nil
	})
}

// ToLog returns a Destination that logs each skipped record at error level (its
// position, key and the reason, not its value) and drops it: for records that may be
// lost, or while a dead-letter store is not there yet.
func ToLog(logger watermill.LoggerAdapter) Destination {
	return DestinationFunc(func(_ context.Context, r *kgo.Record, reason error) error {
		logger.Error("inboxkgo: skipped a record", reason, watermill.LogFields{
			"topic": r.Topic, "partition": r.Partition, "offset": r.Offset, "key": string(r.Key)})
		return nil
	})
}
