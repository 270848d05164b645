package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/watermill-inbox/inbox"
)

// The topic, consumer group and queue of a run are named after it.

// saramaConfig is the workers' consumer config: a new group reads from the oldest
// offset, short long-polls, a 2 s session so that a killed member's partitions move on
// quickly, offsets committed every second (a worker killed in between leaves acked
// records to be delivered again). Each worker slot is a static member (KIP-345): the
// process restarted in a slot takes its partitions back without a rebalance, which
// would otherwise stop the whole group at every kill.
func saramaConfig(o options) *sarama.Config {
	sc := kafka.DefaultSaramaSubscriberConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	sc.Consumer.Group.Session.Timeout = 2 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	sc.Consumer.Group.Rebalance.Timeout = 3 * time.Second
	sc.Consumer.Offsets.AutoCommit.Interval = time.Second
	sc.Version = sarama.V2_3_0_0
	sc.Consumer.Group.InstanceId = fmt.Sprintf("%s-%d", o.run, o.slot)
	return sc
}

func kafkaBrokers(o options) []string { return strings.Split(o.brokers, ",") }

// subscriber returns the worker's subscriber and the topic to consume.
func subscriber(o options) (message.Subscriber, string, error) {
	switch o.transport {
	case "kafka":
		sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
			Brokers:               kafkaBrokers(o),
			Unmarshaler:           kafka.DefaultMarshaler{},
			OverwriteSaramaConfig: saramaConfig(o),
			ConsumerGroup:         o.run,
			NackResendSleep:       10 * time.Millisecond,
		}, watermill.NopLogger{})
		return sub, o.run, err
	case "rabbitmq":
		sub, err := amqp.NewSubscriber(amqp.NewDurableQueueConfig(o.amqpURL), watermill.NopLogger{})
		return sub, o.run, err
	case "nats":
		return natsSubscriber(o)
	case "redis":
		return redisSubscriber(o)
	}
	return nil, "", fmt.Errorf("no subscriber for transport %q", o.transport)
}

// messagesFor returns the copies-times-published messages: copy c of message i has the
// UUID (the inbox key) m<i> and the metadata torture_copy=c. Copies of one message are
// adjacent, so they are consumed at about the same time.
func messagesFor(o options) []*message.Message {
	msgs := make([]*message.Message, 0, o.messages*o.copies)
	for i := range o.messages {
		for c := range o.copies {
			msg := message.NewMessage("m"+strconv.Itoa(i), []byte(strconv.Itoa(i+1)))
			msg.Metadata.Set(copyMetadata, strconv.Itoa(c))
			if o.transport == "kgo" {
				msg.Metadata.Set(idHeader, msg.UUID)
				if kind := o.poisonKind(i); kind != "" {
					msg.Metadata.Set(poisonHeader, kind)
				}
			}
			if o.tenants > 0 {
				msg.Metadata.Set(inbox.DefaultTenantMetadata, tenantOf(o, i))
			}
			msgs = append(msgs, msg)
		}
	}
	return msgs
}

// publish creates the run's topic (one partition per worker), queue or stream and
// publishes every copy of every message.
func publish(ctx context.Context, o options) error {
	msgs := messagesFor(o)
	switch o.transport {
	case "kafka", "kgo":
		admin, err := sarama.NewClusterAdmin(kafkaBrokers(o), sarama.NewConfig())
		if err != nil {
			return fmt.Errorf("Kafka at %s: %w", o.brokers, err)
		}
		defer admin.Close()
		if err := admin.CreateTopic(o.run, &sarama.TopicDetail{NumPartitions: int32(o.workers), ReplicationFactor: 1}, false); err != nil {
			return fmt.Errorf("creating topic %s: %w", o.run, err)
		}
		if o.transport == "kgo" {
			if err := admin.CreateTopic(deadLetterTopic(o), &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
				return fmt.Errorf("creating topic %s: %w", deadLetterTopic(o), err)
			}
		}
		pc := sarama.NewConfig()
		pc.Producer.Return.Successes = true
		pc.Producer.Partitioner = sarama.NewRandomPartitioner // copies land on different partitions
		prod, err := sarama.NewSyncProducer(kafkaBrokers(o), pc)
		if err != nil {
			return err
		}
		defer prod.Close()
		var batch []*sarama.ProducerMessage
		for _, msg := range msgs {
			pm, err := kafka.DefaultMarshaler{}.Marshal(o.run, msg)
			if err != nil {
				return err
			}
			pm.Key = nil
			if msg.Metadata.Get(poisonHeader) == poisonNoKey { // the UUID header left out: no key
				kept := pm.Headers[:0]
				for _, h := range pm.Headers {
					if string(h.Key) != kafka.UUIDHeaderKey {
						kept = append(kept, h)
					}
				}
				pm.Headers = kept
			}
			batch = append(batch, pm)
			if len(batch) == 500 {
				if err := prod.SendMessages(batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			return prod.SendMessages(batch)
		}
		return nil
	case "rabbitmq":
		cfg := amqp.NewDurableQueueConfig(o.amqpURL)
		sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
		if err != nil {
			return fmt.Errorf("RabbitMQ at %s: %w", o.amqpURL, err)
		}
		defer sub.Close()
		if err := sub.SubscribeInitialize(o.run); err != nil { // declares the queue
			return err
		}
		pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
		if err != nil {
			return err
		}
		defer pub.Close()
		for start := 0; start < len(msgs); start += 500 {
			if err := pub.Publish(o.run, msgs[start:min(start+500, len(msgs))]...); err != nil {
				return err
			}
		}
	case "nats":
		return publishNATS(o, msgs)
	case "redis":
		return publishRedis(ctx, o, msgs)
	}
	return nil
}

// dropTransport deletes the run's topic, queue or stream.
func dropTransport(o options) {
	switch o.transport {
	case "kafka", "kgo":
		if admin, err := sarama.NewClusterAdmin(kafkaBrokers(o), sarama.NewConfig()); err == nil {
			_ = admin.DeleteTopic(o.run)
			if o.transport == "kgo" {
				_ = admin.DeleteTopic(deadLetterTopic(o))
			}
			_ = admin.DeleteConsumerGroup(o.run)
			_ = admin.Close()
		}
	case "rabbitmq":
		if conn, err := amqp091.Dial(o.amqpURL); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(o.run, false, false, false)
			}
			_ = conn.Close()
		}
	case "nats", "redis":
		dropStreams(o)
	}
}
