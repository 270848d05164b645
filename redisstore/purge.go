package redisstore

import (
	"context"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

var (
	_ contract.PurgeTurns   = (*Store)(nil)
	_ contract.PurgeCounter = (*Store)(nil)
)

// CountPurge implements contract.PurgeCounter: nothing, as PurgeBatch deletes nothing.
func (s *Store) CountPurge(context.Context, time.Time) (contract.Purged, error) {
	return contract.Purged{}, nil
}

// PurgeBatch implements inbox.Store and does nothing: Redis expires keys after
// Config.Retention by itself. It returns 0, so inbox.Purge and PurgeEvery stop at once.
func (s *Store) PurgeBatch(context.Context, time.Time, int) (contract.Purged, error) {
	return contract.Purged{}, nil
}

// TakePurgeTurn implements contract.PurgeTurns with a turn that every caller gets at
// once and that purges nothing: Redis expires the keys by itself, so that there is
// nothing for a fleet to take turns at. An inbox.Retention on a Redis store runs (and
// reports) empty purges.
func (s *Store) TakePurgeTurn(context.Context, time.Duration) (contract.PurgeTurn, error) {
	return noPurgeTurn{s}, nil
}

// noPurgeTurn is the turn of a store whose keys expire by themselves.
type noPurgeTurn struct{ s *Store }

func (t noPurgeTurn) PurgeBatch(ctx context.Context, before time.Time, limit int) (contract.Purged, error) {
	return t.s.PurgeBatch(ctx, before, limit)
}

func (noPurgeTurn) Release(context.Context) error { return nil }
