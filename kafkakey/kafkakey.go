// Package kafkakey holds inbox key and position functions for messages consumed from
// Kafka with watermill-kafka (github.com/ThreeDotsLabs/watermill-kafka/v3). It lives
// apart from the inbox package so that the core does not import a Kafka client.
package kafkakey

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox"
)

// Position is an inbox.KeyFunc that keys a message by where it sits in Kafka:
// "topic/partition/offset", e.g. "orders/3/1042". Every redelivery of one record (after a
// crash before the offset commit, a rebalance, or watermill-kafka's in-process resend
// after a nack) has the same position, so it needs nothing from the producer: use it for
// records that carry no id, usually behind FirstOf:
//
//	inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents, kafkakey.Position)
//
// The topic comes from message.SubscribeTopicFromCtx (set by a Watermill Router), the
// partition and offset from watermill-kafka's context (kafka.MessagePartitionFromCtx,
// kafka.MessagePartitionOffsetFromCtx). A message without them has no key: the error
// wraps inbox.ErrNoKey.
//
// Caveat: a position names a record only while the topic's log only grows. When the
// topic is deleted and recreated, or the cluster replaced (the dev broker restarted
// without -data-dir), or offsets otherwise start again, new records reuse positions
// already stored: the inbox takes them for duplicates and skips them, so they are lost.
// Purge the consumer's keys (Store.PurgeBatch, Store.Forget) whenever that happens.
// Conversely a record that the producer sent twice sits at two positions and is
// processed twice: Position deduplicates redeliveries, not producer retries. And
// resetting the group's offsets to re-read old records re-reads them at their old
// positions, which are skipped: Forget their keys first when you mean to reprocess.
// Prefer a key the producer sets (the Watermill UUID, a CloudEvents id) when there is one.
func Position(msg *message.Message) (string, error) {
	ctx := msg.Context()
	topic := message.SubscribeTopicFromCtx(ctx)
	if topic == "" {
		return "", fmt.Errorf("%w: no Kafka topic in the message context (kafkakey.Position needs a Watermill Router)", inbox.ErrNoKey)
	}
	partition, ok := kafka.MessagePartitionFromCtx(ctx)
	if !ok {
		return "", fmt.Errorf("%w: no Kafka partition in the message context (was it consumed by watermill-kafka?)", inbox.ErrNoKey)
	}
	offset, ok := kafka.MessagePartitionOffsetFromCtx(ctx)
	if !ok {
		return "", fmt.Errorf("%w: no Kafka offset in the message context (was it consumed by watermill-kafka?)", inbox.ErrNoKey)
	}
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset), nil
}

// Partition is an inbox.PositionFunc for offset mode (inbox.Config.Position) with
// watermill-kafka: the message's topic (message.SubscribeTopicFromCtx, set by a
// Watermill Router), partition, offset and timestamp (watermill-kafka's context). Sarama
// reports no leader epoch and no topic ID: the position has NoLeaderEpoch and no ID, so
// a re-created topic is found by the record times (inbox.Config.TimestampSlack) and,
// when set, inbox.Config.MaxOffsetRewind. A message without a topic, partition or
// offset has no position: the error wraps inbox.ErrNoKey, and the message is never
// processed.
//
// watermill-kafka v3 delivers each partition in order, one message at a time (it waits
// for a message's ack or nack before the next of its partition, and resends a nacked
// one first), with or without a consumer group and whatever the Sarama settings: the
// delivery offset mode needs. Do not put middleware.InstantAck in front of the inbox
// (the inbox refuses the second message of a partition it sees in flight, with
// inbox.ErrNotInOrder).
func Partition(msg *message.Message) (inbox.Position, error) {
	ctx := msg.Context()
	topic := message.SubscribeTopicFromCtx(ctx)
	if topic == "" {
		return inbox.Position{}, fmt.Errorf("%w: no Kafka topic in the message context (kafkakey.Partition needs a Watermill Router)", inbox.ErrNoKey)
	}
	partition, ok := kafka.MessagePartitionFromCtx(ctx)
	if !ok {
		return inbox.Position{}, fmt.Errorf("%w: no Kafka partition in the message context (was it consumed by watermill-kafka?)", inbox.ErrNoKey)
	}
	offset, ok := kafka.MessagePartitionOffsetFromCtx(ctx)
	if !ok {
		return inbox.Position{}, fmt.Errorf("%w: no Kafka offset in the message context (was it consumed by watermill-kafka?)", inbox.ErrNoKey)
	}
	pos := inbox.Position{Topic: topic, Partition: partition, Offset: offset, LeaderEpoch: inbox.NoLeaderEpoch}
	if ts, ok := kafka.MessageTimestampFromCtx(ctx); ok && ts.After(time.Unix(0, 0)) {
		pos.Timestamp = ts
	}
	return pos, nil
}
