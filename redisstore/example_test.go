package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// A handler credits a wallet in Redis through the inbox transaction: the INCRBY runs at
// commit, with the key, once per message.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		panic(err)
	}
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	if err != nil {
		panic(err)
	}
	handler := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := inbox.TxFromContext[*redisstore.Tx](msg.Context())
		if !ok {
			return nil, fmt.Errorf("no inbox transaction")
		}
		return nil, tx.IncrBy(msg.Context(), "wallet:alice", 190).Err()
	})
	_ = handler // router.AddNoPublisherHandler("billing", "orders", sub, handler)
}

// On a Redis Cluster the handler's keys carry the claim's hash tag, so the commit
// script reaches them in the claim's slot.
func ExampleTx_Tag() {
	handler := func(ctx context.Context) error {
		tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
		return tx.Set(ctx, "receipt:"+tx.Tag(), "sent", 0).Err()
	}
	_ = handler
	fmt.Println(redisstore.Slot("receipt:{7:billing:order-1}") == redisstore.Slot("inbox:c:{7:billing:order-1}:7:billing:order-1"))
	// Output: true
}

// Watermill's Deduplicator, shared by every instance through Redis. Set KeyFactory: the
// default hashes the payload, so two messages with one body would count as one; the
// message UUID tells them apart. Set Timeout: Watermill raises a Timeout below 5ms, the
// zero value included, to 5ms, which the repository holds.
func ExampleNewExpiringKeyRepository() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	repo, err := redisstore.NewExpiringKeyRepository(client, redisstore.DedupConfig{Window: 24 * time.Hour})
	if err != nil {
		panic(err)
	}
	dedup := middleware.Deduplicator{
		KeyFactory: func(msg *message.Message) (string, error) { return msg.UUID, nil },
		Repository: repo,
		Timeout:    time.Second,
	}
	_ = dedup.Middleware // router.AddMiddleware(dedup.Middleware)
}
