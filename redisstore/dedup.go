package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	_ "embed"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/dedup.lua
	dedupLua string
	//go:embed lua/undo.lua
	undoLua string

	dedupScript = redis.NewScript(dedupLua)
	undoScript  = redis.NewScript(undoLua)
)

// DefaultDedupPrefix is DedupConfig.Prefix's default.
const DefaultDedupPrefix = "watermill-dedup:"

// abandonWait bounds how long a check the caller gave up on may still run, and then the
// undoing of what it stored.
const abandonWait = 30 * time.Second

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
// every instance of a consumer. IsDuplicate is one script: the first check of a key
// within the window stores the check's random token there and reports false, every
// later one reports true. A check that go-redis resends after a broken connection finds
// its own token and gives the first answer, false, so the message is not dropped.
//
// The Deduplicator's Timeout holds whatever the client's ContextTimeoutEnabled: the
// repository returns when the context ends, with an error (the Deduplicator then nacks
// the message), and undoes in the background what the abandoned check may have stored,
// by its token, so that the redelivery is checked afresh; a redelivery checked by this
// repository before that undo takes the abandoned check's key over. Watermill raises a
// Deduplicator.Timeout below 5ms, the zero value included, to 5ms: set it (e.g. a
// second), or checks slower than that fail and their messages are nacked.
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

	mu        sync.Mutex
	abandoned map[string][]abandonedCheck // by key: checks given up on, not yet undone
}

// abandonedCheck is a check whose caller got an error while it may have stored its token.
type abandonedCheck struct {
	token string
	until time.Time // the key it may have stored has expired by then
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
	return &ExpiringKeyRepository{client: client, cfg: cfg, abandoned: map[string][]abandonedCheck{}}, nil
}

// checked is the answer of one check.
type checked struct {
	duplicate bool
	err       error
}

// IsDuplicate implements middleware.ExpiringKeyRepository: it reports whether key was
// checked within the window, and remembers it for the window if not. It returns by the
// time ctx ends. An unreachable Redis, or a check that did not answer in time, is an
// error (retrying may help), so the Deduplicator nacks the message rather than let it
// through; what that check may have stored is undone.
func (r *ExpiringKeyRepository) IsDuplicate(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("redisstore: checking the dedup key: nothing sent, the context ended: %w", err)
	}
	token := randomToken()
	args := append([]any{token, r.cfg.Window.Milliseconds()}, r.abandonedTokens(key)...)
	answer := make(chan checked, 1)
	go func() {
		// The check runs to its end even when the caller stops waiting, so that what it
		// stored is known, and undone, before the redelivery's check where possible.
		checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonWait)
		defer cancel()
		n, err := dedupScript.Run(checkCtx, r.client, []string{r.cfg.Prefix + key}, args...).Int()
		answer <- checked{duplicate: n == 1, err: err}
	}()
	select {
	case a := <-answer:
		if a.err != nil {
			r.giveUp(ctx, key, token, nil)
			return false, fmt.Errorf("redisstore: checking the dedup key (what the check may have stored is undone, so the redelivery is checked afresh): %w", a.err)
		}
		return a.duplicate, nil
	case <-ctx.Done():
		r.giveUp(ctx, key, token, answer)
		return false, fmt.Errorf("redisstore: checking the dedup key: Redis did not answer before the context ended (the Deduplicator's Timeout, or the message's): %w; the message is nacked, and what the check may have stored is undone so the redelivery is checked afresh",
			context.Cause(ctx))
	}
}

// abandonedTokens returns the tokens of this repository's checks of key that gave up and
// may have stored it, dropping those whose key has expired.
func (r *ExpiringKeyRepository) abandonedTokens(key string) []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	checks := r.abandoned[key]
	if len(checks) == 0 {
		return nil
	}
	now := time.Now()
	tokens := make([]any, 0, len(checks))
	kept := checks[:0]
	for _, c := range checks {
		if now.Before(c.until) {
			kept = append(kept, c)
			tokens = append(tokens, c.token)
		}
	}
	if len(kept) == 0 {
		delete(r.abandoned, key)
	} else {
		r.abandoned[key] = kept
	}
	return tokens
}

// giveUp records that the check of key with token answered nobody, then, once its
// answer (pending, nil if it came) is in, deletes the key if it holds the token. Until
// then a check of the same key by this repository takes the key over.
func (r *ExpiringKeyRepository) giveUp(ctx context.Context, key, token string, pending <-chan checked) {
	r.mu.Lock()
	r.abandoned[key] = append(r.abandoned[key], abandonedCheck{token: token, until: time.Now().Add(abandonWait + r.cfg.Window)})
	r.mu.Unlock()
	go func() {
		if pending != nil {
			if a := <-pending; a.err == nil && a.duplicate {
				r.undone(key, token) // another check's key: this one stored nothing
				return
			}
		}
		undoCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonWait)
		defer cancel()
		if err := undoScript.Run(undoCtx, r.client, []string{r.cfg.Prefix + key}, token).Err(); err == nil {
			r.undone(key, token)
		} // else the key expires after the window; until then checks here take it over
	}()
}

// undone forgets the abandoned check of key with token.
func (r *ExpiringKeyRepository) undone(key, token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	checks := r.abandoned[key]
	for i, c := range checks {
		if c.token == token {
			checks = append(checks[:i], checks[i+1:]...)
			break
		}
	}
	if len(checks) == 0 {
		delete(r.abandoned, key)
	} else {
		r.abandoned[key] = checks
	}
}
