package inbox

import (
	"context"
	"sync"
)

// storedReader is a store that reads a key's stored row outside any transaction, in one
// round trip: what a committed key's duplicate gets. found is false when no row is
// committed for the key (never processed, forgotten, purged, or still in flight).
type storedReader interface {
	readStored(ctx context.Context, rec Record) (claim Claim, found bool, err error)
}

// recentKeys remembers the last keys an Inbox committed or found committed
// (Config.RecentKeys), as hints: a key it holds is read before it is claimed. It never
// answers anything itself: the read does, from the database, so a key forgotten or
// purged since (by this process or another) finds no row and is claimed as usual, and a
// key is added only once its commit went through. A nil *recentKeys holds nothing.
type recentKeys struct {
	reader storedReader
	mu     sync.Mutex
	keys   map[string]struct{}
	ring   []string // the keys in the order they came; the oldest is overwritten
	next   int
}

// newRecentKeys returns the hints for cfg's store, nil when turned off or when the store
// cannot read a stored row on its own.
func newRecentKeys(cfg Config) *recentKeys {
	reader, ok := cfg.Store.(storedReader)
	if !ok || cfg.RecentKeys <= 0 {
		return nil
	}
	return &recentKeys{reader: reader, keys: make(map[string]struct{}, cfg.RecentKeys), ring: make([]string, cfg.RecentKeys)}
}

func recentKey(rec Record) string { return rec.Consumer + "\x00" + rec.Key }

// add remembers rec's key, committed.
func (r *recentKeys) add(rec Record) {
	if r == nil {
		return
	}
	k := recentKey(rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.keys[k]; ok {
		return
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.keys, old)
	}
	r.ring[r.next] = k
	r.keys[k] = struct{}{}
	r.next = (r.next + 1) % len(r.ring)
}

// has reports whether rec's key is remembered.
func (r *recentKeys) has(rec Record) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.keys[recentKey(rec)]
	return ok
}

// read answers a remembered key's duplicate from its stored row, read outside any
// transaction. ok is false when the key is not remembered, or has no row any more, or
// the read failed: the claim then decides, as for any key.
func (r *recentKeys) read(ctx context.Context, rec Record) (Claim, bool) {
	if r == nil || !r.has(rec) {
		return Claim{}, false
	}
	claim, found, err := r.reader.readStored(ctx, rec)
	if err != nil || !found {
		return Claim{}, false
	}
	return claim, true
}
