package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
)

// DefaultDedupPrefix is DedupConfig.Prefix's default.
const DefaultDedupPrefix = "watermill-dedup:"

// DedupConfig configures an ExpiringKeyRepository.
type DedupConfig struct {
	// Window is how long a key is remembered: a message with the same key within it is
	// dropped. Required (Watermill's in-memory repository takes it too); at least 1ms.
	Window time.Duration

	// Prefix starts every Redis key of the repository. Defaults to DefaultDedupPrefix.
	Prefix string
}

// ExpiringKeyRepository is a Redis-backed middleware.ExpiringKeyRepository for
// Watermill's middleware.Deduplicator (Watermill issue #626): deduplication shared by
// every instance of a consumer. IsDuplicate is one SET NX PX: the first check of a key
// within the window stores it and reports false, every later one reports true.
//
// It has the Deduplicator's semantics, which differ from the inbox's: the key is stored
// when the message is first seen, before its handler runs, and it is kept even when the
// handler fails or the process dies, so the redelivery of a message whose handler failed
// is dropped as a duplicate (at most once within the window), and two deliveries racing
// never wait for each other. The inbox (Store) stores the key only with a successful
// commit, so a failed message is processed again (exactly once for effects in Redis).
type ExpiringKeyRepository struct {
	client redis.UniversalClient
	cfg    DedupConfig
}

var _ middleware.ExpiringKeyRepository = (*ExpiringKeyRepository)(nil)

// NewExpiringKeyRepository returns a repository on client. It fails when cfg is invalid,
// naming the field and what to do.
func NewExpiringKeyRepository(client redis.UniversalClient, cfg DedupConfig) (*ExpiringKeyRepository, error) {
	var errs []error
	if client == nil {
		errs = append(errs, errors.New("the client is nil: pass a *redis.Client or *redis.ClusterClient"))
	}
	if cfg.Window < time.Millisecond {
		errs = append(errs, fmt.Errorf("Window is %v: set how long keys are remembered, at least 1ms", cfg.Window))
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultDedupPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("Prefix %q contains a brace: remove it, so each key hashes on its own", cfg.Prefix))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("redisstore: invalid dedup config: %w", err)
	}
	return &ExpiringKeyRepository{client: client, cfg: cfg}, nil
}

// IsDuplicate implements middleware.ExpiringKeyRepository: it reports whether key was
// checked within the window, and remembers it for the window if not. An unreachable Redis
// is an error, so the Deduplicator nacks the message rather than let it through.
func (r *ExpiringKeyRepository) IsDuplicate(ctx context.Context, key string) (bool, error) {
	set, err := r.client.SetNX(ctx, r.cfg.Prefix+key, 1, r.cfg.Window).Result()
	if err != nil {
		return false, fmt.Errorf("redisstore: checking the dedup key: %w", err)
	}
	return !set, nil
}
