package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// gate is this process's queue for one database file's write lock (ADR 81). SQLite lets
// one transaction write at a time; a connection that finds the lock taken sleeps and
// polls (its busy handler sleeps 1, 2, 5 … 100 ms between tries), so writers of one
// process queued on the lock itself take turns late and in no order. Every write
// transaction of the stores of this process on the file passes the gate first: the
// next one starts the moment the last ends, and one that waited too long gives up with
// ErrContended without having touched the database. Other processes still meet at the
// file's lock.
type gate struct{ turn chan struct{} }

func newGate() *gate { return &gate{turn: make(chan struct{}, 1)} }

// gates are the gates of the database files this process opened, by path.
var gates sync.Map

// string → *gate

// gateFor returns the gate of the database file at path, shared by every store of the
// process on that file; an in-memory database (path "") gets a gate of its own.
func gateFor(path string) *gate {
	if path == "" {
		return newGate()
	}
	g, _ := gates.LoadOrStore(path, newGate())
	return g.(*gate)
}

// enter waits for the gate until it is free, ctx ends or wait passes (0: only a free
// gate), and returns the func that leaves it.
func (g *gate) enter(ctx context.Context, wait time.Duration, s *Store) (leave func(), err error) {
	select {
	case g.turn <- struct{}{}:
		return g.leave, nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if wait <= 0 {
		return nil, fmt.Errorf("%w: another transaction of this process holds the database's write lock, and %s is 0", contract.ErrContended, s.waitName())
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case g.turn <- struct{}{}:
		return g.leave, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, fmt.Errorf("%w: another transaction of this process held the database's write lock for longer than %s (%v)", contract.ErrContended, s.waitName(), wait)
	}
}

func (g *gate) leave() { <-g.turn }
