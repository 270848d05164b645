package inbox

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// DefaultTimestampSlack is Config.TimestampSlack's default.
const DefaultTimestampSlack = 10 * time.Second

// PositionFunc derives a consumed message's position, for offset mode
// (Config.Position): kafkakey.Partition for watermill-kafka. A message without one must
// fail with an error wrapping ErrNoKey: it is then never processed.
type PositionFunc func(msg *message.Message) (Position, error)

// ErrOffsetRewound means a record's position cannot follow the stored one: the topic
// was deleted and created again, its log truncated or rewritten, or restored with other
// offsets. Taken for a duplicate, the record would be lost; the inbox refuses it
// instead, before anything is processed, and refuses it again on every redelivery (a
// retry cannot help): the partition stops until an operator says where to resume, with
// `inbox offsets reset` or OffsetStore.SetOffset (Inbox.SetOffset), or deletes the row.
var ErrOffsetRewound = errors.New("record position behind the stored offset does not belong to the same log")

// ErrNotInOrder means records of one partition did not come in order, one at a time, as
// offset mode needs: a batch whose offsets of one partition do not increase, or a
// message of a partition arriving while another of the same partition is still in the
// inbox middleware (a subscriber that delivers a partition's messages concurrently, or
// a middleware such as InstantAck that acks before the handler returns). Nothing was
// processed: use a subscriber that delivers each partition in order, one message at a
// time (see the README), or key mode. A retry does not help.
var ErrNotInOrder = errors.New("records of a partition not delivered in order, one at a time")

// ProcessOffsets is ProcessBatch in offset mode: positions are the records' places in
// their partitions (any number of partitions, each in increasing offset order), and fn
// runs once, in one transaction, with the records past each partition's stored offset,
// while the offsets move past them in the same transaction: one statement per
// partition. fresh holds their indexes in positions. fn is not called when none is new.
//
// A partition whose row another transaction holds (a rebalance: its old owner still
// processing) is waited for, then judged by the offset it committed. fn's error, or a
// panic, rolls the offsets back with fn's writes: a retry of the same records gets the
// same new ones. Nothing is stored per record, and no output: a duplicate replays
// nothing.
//
// The batch is refused before anything is processed, with a *BatchItemError naming the
// record, when a position has no topic or a negative partition or offset (ErrNoKey),
// when a partition's offsets do not increase (ErrNotInOrder), or when a record cannot
// follow the stored position (ErrOffsetRewound: see Config.TimestampSlack and
// Config.MaxOffsetRewind). A transaction in ctx is joined. As with ProcessBatch,
// Config.MaxAttempts and a store that is not an OffsetStore fail with
// errors.ErrUnsupported.
func (ib *Inbox) ProcessOffsets(ctx context.Context, consumer string, positions []Position, fn func(ctx context.Context, fresh []int) error) (BatchResult, error) {
	keys := make([]string, len(positions))
	for i, p := range positions {
		keys[i] = p.String()
	}
	res := BatchResult{Duplicate: make([]bool, len(positions))}
	store, err := ib.offsetStore(consumer, true)
	if err != nil || len(positions) == 0 {
		return res, err
	}
	parts, bad, err := groupPositions(positions)
	if err != nil {
		outcome := OutcomeFailed
		if errors.Is(err, ErrNoKey) {
			outcome = OutcomeNoKey
		}
		return res, ib.refuseBatch(ctx, consumer, keys, bad, outcome, 0, fmt.Errorf("consumer %q record %s: %w", consumer, keys[bad], err))
	}
	claim := func(ctx context.Context, joined any) (batchVerdict, error) {
		return ib.claimPartitions(ctx, store, joined, consumer, positions, parts)
	}
	return ib.runBatch(ctx, consumer, keys, claim, fn)
}

// ProcessOffsetsOf is ProcessOffsets for a batch of any type, e.g. the records a Kafka
// client polled: position derives each record's position, and fn gets the new records
// themselves, in order. A position error refuses the batch before anything is
// processed (a *BatchItemError wrapping it: make position's errors wrap ErrNoKey).
func ProcessOffsetsOf[T any](ctx context.Context, ib *Inbox, consumer string, batch []T, position func(T) (Position, error), fn func(ctx context.Context, fresh []T) error) (BatchResult, error) {
	positions := make([]Position, len(batch))
	for i, m := range batch {
		p, err := position(m)
		if err != nil {
			return BatchResult{Duplicate: make([]bool, len(batch))}, ib.refuseBatch(ctx, consumer, make([]string, len(batch)), i, OutcomeNoKey, 0, err)
		}
		positions[i] = p
	}
	return ib.ProcessOffsets(ctx, consumer, positions, func(ctx context.Context, fresh []int) error {
		return fn(ctx, pick(batch, fresh))
	})
}

// Offsets returns consumer's stored offsets (every consumer's when it is empty), for an
// operator or a consumer that seeks to them on partition assignment (as inboxkgo does).
// It fails with errors.ErrUnsupported when the store is not an OffsetStore.
func (ib *Inbox) Offsets(ctx context.Context, consumer string) ([]PartitionOffset, error) {
	store, err := ib.offsetStore(consumer, consumer != "")
	if err != nil {
		return nil, err
	}
	return store.Offsets(ctx, consumer)
}

// SetOffset sets consumer's stored next offset of one partition (OffsetStore.SetOffset):
// records from next on are then new; a negative next deletes the row. It fails with
// errors.ErrUnsupported when the store is not an OffsetStore.
func (ib *Inbox) SetOffset(ctx context.Context, consumer, topic string, partition int32, next int64) (bool, error) {
	store, err := ib.offsetStore(consumer, true)
	if err != nil {
		return false, err
	}
	return store.SetOffset(ctx, consumer, topic, partition, next)
}

// offsetStore returns the store as an OffsetStore, or why offset mode cannot run on it.
func (ib *Inbox) offsetStore(consumer string, checkConsumer bool) (OffsetStore, error) {
	if checkConsumer {
		if err := ValidateConsumer(consumer); err != nil {
			return nil, fmt.Errorf("inbox: %w", err)
		}
	}
	store, ok := ib.cfg.Store.(OffsetStore)
	if !ok {
		return nil, fmt.Errorf("inbox: consumer %q: %w: the store (%T) keeps no offsets (inbox.OffsetStore): use key mode", consumer, errors.ErrUnsupported, ib.cfg.Store)
	}
	return store, nil
}

// partition is one partition of a batch: its span and the indexes of its records.
type partition struct {
	span  OffsetSpan
	items []int
}

// groupPositions groups a batch's positions by partition, sorted by topic and
// partition, and checks them; bad is the index of the position an error is about.
func groupPositions(positions []Position) (parts []partition, bad int, err error) {
	type tp struct {
		topic string
		part  int32
	}
	index := map[tp]int{}
	for i, p := range positions {
		switch {
		case p.Topic == "":
			return nil, i, fmt.Errorf("%w: the position has no topic", ErrNoKey)
		case p.Partition < 0 || p.Offset < 0:
			return nil, i, fmt.Errorf("%w: partition %d, offset %d: neither may be negative", ErrNoKey, p.Partition, p.Offset)
		}
		k := tp{p.Topic, p.Partition}
		j, ok := index[k]
		if !ok {
			j = len(parts)
			index[k] = j
			parts = append(parts, partition{span: OffsetSpan{Topic: p.Topic, Partition: p.Partition, First: p.Offset, FirstEpoch: p.LeaderEpoch, MaxTimestamp: -1, TopicID: p.TopicID}})
		} else if last := positions[parts[j].items[len(parts[j].items)-1]]; p.Offset <= last.Offset {
			return nil, i, fmt.Errorf("%w: offset %d comes after offset %d of the same partition", ErrNotInOrder, p.Offset, last.Offset)
		}
		s := &parts[j].span
		s.Last, s.LastEpoch = p.Offset, p.LeaderEpoch
		if ms := unixMilli(p.Timestamp); ms > s.MaxTimestamp {
			s.MaxTimestamp = ms
		}
		if s.TopicID == nil {
			s.TopicID = p.TopicID
		}
		parts[j].items = append(parts[j].items, i)
	}
	slices.SortFunc(parts, func(a, b partition) int {
		return cmp.Or(cmp.Compare(a.span.Topic, b.span.Topic), cmp.Compare(a.span.Partition, b.span.Partition))
	})
	return parts, 0, nil
}

// unixMilli returns t in Unix milliseconds; -1 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixMilli()
}

// claimPartitions claims the partitions of a batch: one statement each moves the
// offsets of those wholly past their stored position; the others are judged record by
// record against what they hold, and those with new records past a duplicate prefix
// move in a second call.
func (ib *Inbox) claimPartitions(ctx context.Context, store OffsetStore, joined any, consumer string, positions []Position, parts []partition) (batchVerdict, error) {
	spans := make([]OffsetSpan, len(parts))
	for i, p := range parts {
		spans[i] = p.span
	}
	var claim OffsetClaim
	var err error
	if joined != nil {
		claim, err = store.ClaimOffsetsIn(ctx, joined, consumer, spans)
	} else {
		claim, err = store.ClaimOffsets(ctx, consumer, spans)
	}
	v := batchVerdict{tx: claim.Tx, dup: make([]bool, len(positions)), mismatch: make([]bool, len(positions))}
	if err != nil {
		return v, err
	}
	if len(claim.Partitions) != len(spans) {
		return v, fmt.Errorf("inbox: the store answered %d partitions for %d", len(claim.Partitions), len(spans))
	}
	var rest []OffsetSpan // partitions to move past a duplicate prefix
	for i, st := range claim.Partitions {
		if st.Moved {
			continue
		}
		p := parts[i]
		firstNew := -1
		for _, j := range p.items {
			pos := positions[j]
			if err := ib.followsStored(pos, st); err != nil {
				ib.cfg.Logger.Error("inbox: record refused: its position cannot follow the stored offset", err,
					withTenant(ctx, watermill.LogFields{"consumer": consumer, "record": pos.String()}))
				return v, &BatchItemError{Index: j, Err: err}
			}
			if pos.Offset < st.Next {
				v.dup[j] = true
				if pos.Offset == st.Next-1 {
					v.output = st.Output
				}
			} else if firstNew < 0 {
				firstNew = j
			}
		}
		if firstNew >= 0 {
			s := p.span
			s.First, s.FirstEpoch = positions[firstNew].Offset, positions[firstNew].LeaderEpoch
			rest = append(rest, s)
		}
	}
	if len(rest) > 0 {
		moved, err := store.ClaimOffsetsIn(ctx, claim.Tx.Handle(), consumer, rest)
		if err != nil {
			return v, err
		}
		for i, st := range moved.Partitions {
			if !st.Moved {
				return v, fmt.Errorf("inbox: the stored offset of %s/%d moved while its row was locked: %w", rest[i].Topic, rest[i].Partition, ErrContended)
			}
		}
	}
	return v, nil
}

// followsStored checks that a record can follow the stored position of its partition:
// a record that cannot is from another log (the topic re-created, its log truncated, its
// offsets reset), and would be lost if taken for a duplicate.
func (ib *Inbox) followsStored(pos Position, st PartitionState) error {
	reset := fmt.Sprintf("if that is meant, set where to resume: inbox offsets reset --topic %s --partition %d --to N (or Inbox.SetOffset), or delete the row with --to -1", pos.Topic, pos.Partition)
	if pos.TopicID != nil && st.TopicID != nil && !bytes.Equal(pos.TopicID, st.TopicID) {
		return fmt.Errorf("%w: the topic's ID is %x, the stored offset %d is of topic ID %x: the topic was deleted and created again; %s",
			ErrOffsetRewound, pos.TopicID, st.Next, st.TopicID, reset)
	}
	knownEpochs := pos.LeaderEpoch >= 0 && st.LeaderEpoch >= 0
	if pos.Offset >= st.Next {
		if knownEpochs && pos.LeaderEpoch < st.LeaderEpoch {
			return fmt.Errorf("%w: the record is past the stored offset %d but its leader epoch %d is older than the processed record's %d: it is another log; %s",
				ErrOffsetRewound, st.Next, pos.LeaderEpoch, st.LeaderEpoch, reset)
		}
		return nil
	}
	if knownEpochs && pos.LeaderEpoch > st.LeaderEpoch {
		return fmt.Errorf("%w: the record is below the stored offset %d but its leader epoch %d is newer than the processed record's %d: the log was truncated and written again; %s",
			ErrOffsetRewound, st.Next, pos.LeaderEpoch, st.LeaderEpoch, reset)
	}
	if ms := unixMilli(pos.Timestamp); ib.cfg.TimestampSlack >= 0 && ms >= 0 && st.MaxTimestamp >= 0 && ms > st.MaxTimestamp+ib.cfg.TimestampSlack.Milliseconds() {
		return fmt.Errorf("%w: the record is below the stored offset %d but was written at %s, after every record processed so far (the latest at %s, Config.TimestampSlack %v): the topic was re-created or its offsets reset; %s",
			ErrOffsetRewound, st.Next, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), time.UnixMilli(st.MaxTimestamp).UTC().Format(time.RFC3339Nano), ib.cfg.TimestampSlack, reset)
	}
	if ib.cfg.MaxOffsetRewind > 0 && st.Next-pos.Offset > ib.cfg.MaxOffsetRewind {
		return fmt.Errorf("%w: the record is %d offsets below the stored offset %d, more than Config.MaxOffsetRewind (%d): the topic was re-created or its offsets reset; %s",
			ErrOffsetRewound, st.Next-pos.Offset, st.Next, ib.cfg.MaxOffsetRewind, reset)
	}
	return nil
}
