package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// openRedis connects to the Redis a redis:// or rediss:// URL names and returns the
// store whose keys start with prefix ("<table>:" from --table: the default table,
// inbox, gives redisstore's default prefix). Purge does nothing there: Redis expires
// the keys.
func openRedis(_ context.Context, dsn, prefix string) (inbox.Store, func(), error) {
	opts, err := redis.ParseURL(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the Redis URL %s: %w", redact(dsn), err)
	}
	opts.PoolSize = 2
	client := redis.NewClient(opts)
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return store, func() { _ = client.Close() }, nil
}
