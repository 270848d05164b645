package main

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// needStreams checks that NATS (with JetStream) or Redis answers.
func needStreams(t *testing.T, transport string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch transport {
	case "nats":
		nc, err := nats.Connect(envOr("INBOX_NATS_URL", "nats://127.0.0.1:4222"), nats.Timeout(3*time.Second))
		if err == nil {
			var js nats.JetStreamContext
			if js, err = nc.JetStream(); err == nil {
				_, err = js.AccountInfo()
			}
			nc.Close()
		}
		if err != nil {
			unavailable(t, "NATS with JetStream", "INBOX_NATS_URL", err)
		}
	case "redis":
		opts, err := redis.ParseURL(envOr("INBOX_REDIS_URL", "redis://127.0.0.1:6379/0"))
		if err == nil {
			c := redis.NewClient(opts)
			err = c.Ping(ctx).Err()
			_ = c.Close()
		}
		if err != nil {
			unavailable(t, "Redis", "INBOX_REDIS_URL", err)
		}
	}
}
