// Package tablestats samples an inbox table's stats (keys, oldest key, and unfinished
// attempts when the store counts them, per consumer) for the table metrics of inboxprom and inboxotel, at a bounded
// cost: at most one sample per interval, run in the background, never on the path of a
// scrape or a metric collection, which gets the last sample at once.
package tablestats

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/oneline"
)

// Sample is what one sampling of the table found.
type Sample struct {
	// At is when the sampling started; zero before the first one succeeded.
	At time.Time
	// Took is how long the store's queries took: the sampling's cost.
	Took time.Duration
	// Consumers are the table's consumers, by name.
	Consumers []inbox.ConsumerStats
	// Unfinished is the unfinished attempts per consumer (inbox.AttemptCounter); nil
	// when the store cannot count them.
	Unfinished map[string]int64
}

// Names returns every consumer the sample knows of, with keys or unfinished attempts,
// in order.
func (s Sample) Names() []string {
	seen := map[string]bool{}
	var names []string
	for _, c := range s.Consumers {
		seen[c.Consumer] = true
		names = append(names, c.Consumer)
	}
	for c := range s.Unfinished {
		if !seen[c] {
			names = append(names, c)
		}
	}
	slices.Sort(names)
	return names
}

// Sampler samples a store's Stats at most once per interval.
type Sampler struct {
	stats    func(ctx context.Context) ([]inbox.ConsumerStats, error)
	attempts func(ctx context.Context) (map[string]int64, error) // nil: the store cannot
	interval time.Duration
	timeout  time.Duration

	mu      sync.Mutex
	last    Sample        // the last successful sample
	tried   time.Time     // when the last sampling started, successful or not
	running chan struct{} // closed when the sampling in progress ends; nil when none runs
	failed  int64         // samplings that failed
	err     error         // the last sampling's error, nil once one succeeds
}

// Errors a Sampler's constructor returns.
var (
	errNoStore  = errors.New("Store is nil: set it to the inbox's store")
	errInterval = errors.New("Interval is negative: use 0 for the default, or how often the table may be sampled")
	errTimeout  = errors.New("Timeout is negative: use 0 for the default, or how long one sampling may take")
)

// Check validates a config's fields; the caller names its package in the error.
func Check(store inbox.Store, interval, timeout time.Duration) error {
	var errs []error
	if store == nil {
		errs = append(errs, errNoStore)
	}
	if interval < 0 {
		errs = append(errs, errInterval)
	}
	if timeout < 0 {
		errs = append(errs, errTimeout)
	}
	return oneline.Join(errs...)
}

// New returns a Sampler of store's Stats; interval and timeout must be positive.
func New(store inbox.Store, interval, timeout time.Duration) *Sampler {
	s := &Sampler{stats: store.Stats, interval: interval, timeout: timeout}
	if c, ok := store.(inbox.AttemptCounter); ok {
		s.attempts = c.UnfinishedAttempts
	}
	return s
}

// Latest returns the last successful sample and how many samplings failed so far. When
// that sample is older than the interval (or there is none), and the last try too, it
// starts a sampling in the background, whose result a later call returns: a caller never
// waits on the database.
func (s *Sampler) Latest() (Sample, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil && time.Since(s.tried) >= s.interval {
		s.start()
	}
	return s.last, s.failed
}

// Refresh samples the table now (or waits for the sampling in progress), and returns the
// last successful sample and the error of the sampling it waited for.
func (s *Sampler) Refresh(ctx context.Context) (Sample, error) {
	s.mu.Lock()
	if s.running == nil {
		s.start()
	}
	done := s.running
	s.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return Sample{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.err
}

// start begins a sampling in the background; s.mu is held.
func (s *Sampler) start() {
	done := make(chan struct{})
	s.running, s.tried = done, time.Now()
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		at := time.Now()
		consumers, err := s.stats(ctx)
		var unfinished map[string]int64
		if err == nil && s.attempts != nil {
			unfinished, err = s.attempts(ctx)
		}
		took := time.Since(at)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.running, s.err = nil, err
		if err != nil {
			s.failed++
			return
		}
		s.last = Sample{At: at, Took: took, Consumers: consumers, Unfinished: unfinished}
	}()
}
