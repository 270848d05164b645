package brokertest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

const (
	defaultNATSURL  = "nats://127.0.0.1:4222"
	defaultRedisURL = "redis://127.0.0.1:6379/0"
)

// NATSURL returns INBOX_NATS_URL or the local NATS server, after checking that it
// answers and has JetStream enabled.
func NATSURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("INBOX_NATS_URL")
	if url == "" {
		url = defaultNATSURL
	}
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	if err == nil {
		var js nats.JetStreamContext
		if js, err = nc.JetStream(); err == nil {
			_, err = js.AccountInfo()
		}
		nc.Close()
	}
	if err != nil {
		Unavailable(t, "NATS with JetStream", "INBOX_NATS_URL", err)
	}
	return url
}

// JetStream returns a JetStream context on a connection closed when the test ends.
func JetStream(t testing.TB, url string) nats.JetStreamContext {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// DeleteStreamOnCleanup deletes the JetStream stream (and its consumers) when the test
// ends.
func DeleteStreamOnCleanup(t testing.TB, url, stream string) {
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err != nil {
			return
		}
		defer nc.Close()
		if js, err := nc.JetStream(); err == nil {
			_ = js.DeleteStream(stream)
		}
	})
}

// RedisURL returns INBOX_REDIS_URL or the local Redis, after checking that it answers.
func RedisURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("INBOX_REDIS_URL")
	if url == "" {
		url = defaultRedisURL
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("INBOX_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		Unavailable(t, "Redis", "INBOX_REDIS_URL", err)
	}
	return url
}

// RedisClient returns a client on url. The caller closes it, or hands it to a
// watermill-redisstream subscriber or publisher, whose Close closes it.
func RedisClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewClient(opts)
}

// DeleteRedisKeyOnCleanup deletes the key (a stream) when the test ends.
func DeleteRedisKeyOnCleanup(t testing.TB, url, key string) {
	t.Cleanup(func() {
		c := RedisClient(t, url)
		defer c.Close()
		_ = c.Del(context.Background(), key).Err()
	})
}
