// Package kafkakey holds inbox key functions for messages consumed from Kafka with
// watermill-kafka (github.com/ThreeDotsLabs/watermill-kafka/v3). It lives apart from the
// inbox package so that the core does not import a Kafka client.
package kafkakey

import (
	"fmt"

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
// Caveat: a position is only unique while the topic's offsets only grow. A topic that is
// deleted and recreated, or truncated, starts again at offset 0, so new records reuse
// positions already stored: the inbox skips them as duplicates and they are lost. The
// same happens to a record that a producer sends twice: it gets two positions and is
// processed twice. Prefer a key the producer sets (the Watermill UUID, a CloudEvents id);
// if you use Position, purge the consumer's keys (Store.PurgeBatch, Store.Forget) whenever
// a topic is recreated, and never point the consumer at a different cluster with the same
// topic names. Resetting the consumer group's offsets to re-read a topic is safe: the
// re-read records keep their positions and are skipped, which is what a re-read after a
// reset usually should not do, so Forget the keys first when you mean to reprocess.
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
