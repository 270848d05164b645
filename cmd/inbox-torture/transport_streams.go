package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox/natskey"
)

// NATS JetStream: the parent creates a stream and one durable push consumer named after
// the run, delivering to a queue group of the same name that every worker joins (bound
// to the consumer, so that a worker's subscriber never deletes it). A message a killed
// worker held unacked is redelivered after natsAckWait. Each worker handles one message
// at a time; natsMaxAckPending bounds the messages delivered and not acked across the
// group, so that few wait in a worker's buffer while their AckWait runs.
const natsAckWait = 3 * time.Second

func natsMaxAckPending(o options) int { return 4 * o.workers }

func natsSubscriber(o options) (message.Subscriber, string, error) {
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL:              o.natsURL,
		QueueGroupPrefix: o.run,
		SubscribersCount: 1,
		AckWaitTimeout:   natsAckWait - 500*time.Millisecond, // give up before JetStream redelivers
		CloseTimeout:     2 * time.Second,
		Unmarshaler:      natskey.Unmarshaler{},
		JetStream: wmnats.JetStreamConfig{
			DurablePrefix:    o.run,
			SubscribeOptions: []nats.SubOpt{nats.Bind(o.run, o.run), nats.ManualAck()},
		},
	}, watermill.NopLogger{})
	return sub, o.run, err
}

func publishNATS(o options, msgs []*message.Message) error {
	nc, err := nats.Connect(o.natsURL)
	if err != nil {
		return fmt.Errorf("NATS at %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(1000))
	if err != nil {
		return err
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: o.run, Subjects: []string{o.run}}); err != nil {
		return fmt.Errorf("creating stream %s: %w", o.run, err)
	}
	if _, err := js.AddConsumer(o.run, &nats.ConsumerConfig{
		Durable: o.run, DeliverGroup: o.run, DeliverSubject: nats.NewInbox(), DeliverPolicy: nats.DeliverAllPolicy,
		AckPolicy: nats.AckExplicitPolicy, AckWait: natsAckWait, MaxAckPending: natsMaxAckPending(o),
	}); err != nil {
		return fmt.Errorf("creating consumer %s: %w", o.run, err)
	}
	for _, msg := range msgs {
		nm, err := (&wmnats.NATSMarshaler{}).Marshal(o.run, msg)
		if err != nil {
			return err
		}
		if _, err := js.PublishMsgAsync(nm); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return fmt.Errorf("NATS: %d publishes unacknowledged after a minute", js.PublishAsyncPending())
	}
	if info, err := js.StreamInfo(o.run); err != nil {
		return err
	} else if info.State.Msgs != uint64(len(msgs)) {
		return fmt.Errorf("NATS: stream %s holds %d messages, %d published", o.run, info.State.Msgs, len(msgs))
	}
	return nil
}

// Redis Streams: one stream and one consumer group named after the run; each worker
// slot is a consumer of its own name. The entries a killed worker read and did not ack
// stay pending until a claim loop (every redisClaimInterval) takes those idle for
// redisMaxIdleTime; a nack resends in-process after 10 ms.
const (
	redisMaxIdleTime   = time.Second
	redisClaimInterval = 250 * time.Millisecond
)

func redisClient(o options) (*redis.Client, error) {
	opts, err := redis.ParseURL(o.redisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis-url: %w", err)
	}
	return redis.NewClient(opts), nil
}

func redisSubscriber(o options) (message.Subscriber, string, error) {
	c, err := redisClient(o)
	if err != nil {
		return nil, "", err
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:          c,
		ConsumerGroup:   o.run,
		Consumer:        fmt.Sprintf("w%d", o.slot),
		NackResendSleep: 10 * time.Millisecond,
		MaxIdleTime:     redisMaxIdleTime,
		ClaimInterval:   redisClaimInterval,
	}, watermill.NopLogger{})
	return sub, o.run, err
}

func publishRedis(ctx context.Context, o options, msgs []*message.Message) error {
	c, err := redisClient(o)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.XGroupCreateMkStream(ctx, o.run, o.run, "0").Err(); err != nil {
		return fmt.Errorf("Redis at %s: creating group %s: %w", o.redisURL, o.run, err)
	}
	for start := 0; start < len(msgs); start += 500 {
		pipe := c.Pipeline()
		for _, msg := range msgs[start:min(start+500, len(msgs))] {
			values, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal(o.run, msg)
			if err != nil {
				return err
			}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: o.run, Values: values})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

func dropStreams(o options) {
	switch o.transport {
	case "nats":
		if nc, err := nats.Connect(o.natsURL); err == nil {
			if js, err := nc.JetStream(); err == nil {
				_ = js.DeleteStream(o.run)
			}
			nc.Close()
		}
	case "redis":
		if c, err := redisClient(o); err == nil {
			_ = c.Del(context.Background(), o.run).Err()
			_ = c.Close()
		}
	}
}
