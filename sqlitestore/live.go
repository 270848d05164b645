package sqlitestore

import (
	"fmt"
	"hash/fnv"
	"os"
	"sync"
)

// running tells which attempts (inbox.Config.MaxAttempts) are still running, in this
// process or another one on the same database file (ADR 82). SQLite has no session that
// dies with its process and no row locks, so an attempt holds instead, while it runs, an
// exclusive advisory lock on one byte of a lock file next to the database
// (<database>-inbox-attempts.lock), at an offset derived from its token; the operating
// system drops the lock when the process dies. An attempt row whose byte is free is one
// whose process died, or that ended without its row being deleted; one whose byte is
// held by another process is running there (its delivery waits for the key, or is
// between its start and its claim). Advisory locks of a process do not conflict with
// each other, so the process's own attempts are known from a registry instead.
type running struct {
	path string // the lock file; "" for an in-memory database: the registry alone

	mu      sync.Mutex
	file    *os.File                 // opened once, never closed: closing it would drop every lock
	attempt map[string]*attemptState // this process's running attempts, by token
}

// attemptState is one running attempt of this process.
type attemptState struct {
	consumer, key string
	// pending: the attempt ended, but deleting its row failed (the write lock stayed with
	// another process): it stays marked as running until a later write of this process
	// deletes the row (Store.endPending), so that nobody counts it as a crash.
	pending bool
}

// runnings are the lock files this process opened, by database path.
var runnings sync.Map

// string → *running

// runningFor returns the attempts of the database at path (in memory: "", a registry
// of its own).
func runningFor(path string) *running {
	if path == "" {
		return &running{attempt: map[string]*attemptState{}}
	}
	r, _ := runnings.LoadOrStore(path, &running{path: path + "-inbox-attempts.lock", attempt: map[string]*attemptState{}})
	return r.(*running)
}

// lockFile opens the lock file once.
func (r *running) lockFile() (*os.File, error) {
	if r.file == nil && r.path != "" {
		f, err := os.OpenFile(r.path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening the attempts' lock file: %w", err)
		}
		r.file = f
	}
	return r.file, nil
}

// start marks the attempt as running: its byte locked, and registered.
func (r *running) start(token, consumer, key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := r.lockFile()
	if err != nil {
		return err
	}
	if f != nil {
		if err := lockByte(f, attemptByte(token)); err != nil {
			return fmt.Errorf("locking the attempt's byte in %s: %w", r.path, err)
		}
	}
	r.attempt[token] = &attemptState{consumer: consumer, key: key}
	return nil
}

// end marks the attempts as no longer running, once their rows are gone (or, abandoned,
// are to stay). It ignores attempts that do not run here.
func (r *running) end(tokens ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, token := range tokens {
		if r.attempt[token] == nil {
			continue
		}
		delete(r.attempt, token)
		if r.file != nil {
			_ = unlockByte(r.file, attemptByte(token))
		}
	}
}

// runsHere reports whether the attempt runs in this process.
func (r *running) runsHere(token string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempt[token] != nil
}

// pend marks a running attempt whose row could not be deleted: see attemptState.
func (r *running) pend(token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.attempt[token]; a != nil {
		a.pending = true
	}
}

// pendingEnds returns the attempts whose end is pending.
func (r *running) pendingEnds() map[string]attemptState {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p map[string]attemptState
	for token, a := range r.attempt {
		if a.pending {
			if p == nil {
				p = map[string]attemptState{}
			}
			p[token] = *a
		}
	}
	return p
}

// isRunning reports whether the attempt runs in this process, or holds its byte in
// another one.
func (r *running) isRunning(token string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attempt[token] != nil {
		return true, nil
	}
	f, err := r.lockFile()
	if err != nil || f == nil {
		return false, err
	}
	held, err := byteHeld(f, attemptByte(token))
	if err != nil {
		return false, fmt.Errorf("testing the attempt's byte in %s: %w", r.path, err)
	}
	return held, nil
}

// attemptByte is the offset of a token's byte: 62 bits of its hash, so that two
// attempts' bytes practically never meet.
func attemptByte(token string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(token))
	return int64(h.Sum64() >> 2)
}
