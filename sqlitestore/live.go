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
	file    *os.File // opened once, never closed: closing it would drop every lock
	attempt map[string]bool
}

// runnings are the lock files this process opened, by database path.
var runnings sync.Map // string → *running

// runningFor returns the attempts of the database at path (in memory: "", a registry
// of its own).
func runningFor(path string) *running {
	if path == "" {
		return &running{attempt: map[string]bool{}}
	}
	r, _ := runnings.LoadOrStore(path, &running{path: path + "-inbox-attempts.lock", attempt: map[string]bool{}})
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

// start marks the attempt as running: registered, and its byte locked.
func (r *running) start(token string) error {
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
	r.attempt[token] = true
	return nil
}

// end marks the attempt as no longer running. It does nothing for an attempt that is
// not running here.
func (r *running) end(token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.attempt[token] {
		return
	}
	delete(r.attempt, token)
	if r.file != nil {
		_ = unlockByte(r.file, attemptByte(token))
	}
}

// isRunning reports whether the attempt runs in this process, or holds its byte in
// another one.
func (r *running) isRunning(token string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attempt[token] {
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
