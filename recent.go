package inbox

import (
	"context"
	"sync"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// recentKeys remembers the last keys an Inbox committed or found committed
// (Config.RecentKeys), as hints: a key it holds is read before it is claimed. It never
// answers anything itself: the read does, from the database, so a key forgotten or
// purged since (by this process or another) finds no row and is claimed as usual, and a
// key is added only once its commit went through. A nil *recentKeys holds nothing.
type recentKeys struct {
	mu   sync.Mutex
	keys map[recentKey]struct{}
	ring []recentKey // the keys in the order they came; the oldest is overwritten
	next int
}

// recentKey names a key in its tenant (a TenantStore keeps a key per tenant).
type recentKey struct{ tenant, consumer, key string }

// newRecentKeys returns the hints for cfg's store, nil when turned off or when the store
// cannot read a stored row on its own.
func newRecentKeys(cfg Config) *recentKeys {
	if _, ok := cfg.Store.(contract.StoredReader); !ok || cfg.RecentKeys <= 0 {
		return nil
	}
	return &recentKeys{keys: make(map[recentKey]struct{}, cfg.RecentKeys), ring: make([]recentKey, cfg.RecentKeys)}
}

func recentKeyOf(ctx context.Context, rec Record) recentKey {
	tenant, _ := TenantFromContext(ctx)
	return recentKey{tenant, rec.Consumer, rec.Key}
}

// add remembers rec's key, committed in ctx's tenant.
func (r *recentKeys) add(ctx context.Context, rec Record) {
	if r == nil {
		return
	}
	k := recentKeyOf(ctx, rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.keys[k]; ok {
		return
	}
	if len(r.keys) == len(r.ring) { // full: the ring's keys are distinct, the oldest goes
		delete(r.keys, r.ring[r.next])
	}
	r.ring[r.next] = k
	r.keys[k] = struct{}{}
	r.next = (r.next + 1) % len(r.ring)
}

// has reports whether rec's key is remembered in ctx's tenant; a nil *recentKeys
// remembers nothing.
func (r *recentKeys) has(ctx context.Context, rec Record) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.keys[recentKeyOf(ctx, rec)]
	return ok
}

type replayHintContextKey struct{}

// ContextWithReplayHint returns a copy of ctx that says its delivery is likely a replay:
// an HTTP client's retry, a message the broker marks as redelivered. The Inbox then reads
// the key's stored row before it claims the key, as it does for the keys it committed
// itself (Config.RecentKeys), so that the replay of a key another process committed (or
// this one before a restart) is answered in one round trip instead of a refused claim
// and a read. A hint on a first delivery costs that read, one round trip more. The hint
// never answers anything: a key without a committed row (new, forgotten, purged, or
// still in flight) is claimed as any other. Stores that cannot read a row on their own
// (SQLite, Redis, and a TenantStore's tenants on them) ignore it, as they do
// RecentKeys; so do joined transactions and offset mode. inboxhttp sets it from
// Config.ReplayHint; for messages, a middleware outside the inbox's can set it in the
// message context (ADR 125).
func ContextWithReplayHint(ctx context.Context) context.Context {
	return context.WithValue(ctx, replayHintContextKey{}, true)
}

// replayHinted reports whether ctx carries ContextWithReplayHint.
func replayHinted(ctx context.Context) bool {
	hinted, _ := ctx.Value(replayHintContextKey{}).(bool)
	return hinted
}

// readFirst answers the duplicate of a key the Inbox remembers, or of a delivery hinted
// as a replay, from its stored row, read outside any transaction. ok is false when
// neither applies, when the store cannot read a row on its own, when the key has no
// committed row, or when the read failed: the claim then decides, as for any key.
func (ib *Inbox) readFirst(ctx context.Context, rec Record) (Claim, bool) {
	if ib.reader == nil || !(ib.recent.has(ctx, rec) || replayHinted(ctx)) {
		return Claim{}, false
	}
	claim, found, err := ib.reader.ReadStored(ctx, rec)
	if err != nil || !found {
		return Claim{}, false
	}
	return claim, true
}
