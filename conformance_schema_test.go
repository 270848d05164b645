package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// Creating the schema from every replica at once (ADR 133): replicas that start
// together each call CreateSchema on a fresh database, as the quick start does.

// schemaCreator is a store whose tables CreateSchema creates: every SQL store, and a
// TenantStore (every tenant's).
type schemaCreator interface {
	CreateSchema(ctx context.Context) error
}

// concurrentCreators and concurrentRounds: how many creators race, how many times.
const (
	concurrentCreators = 8
	concurrentRounds   = 10
)

func exerciseSchemaCreation(t *testing.T, f storeFlavour) {
	ctx := f.context()

	t.Run("ConcurrentCreateSchema", func(t *testing.T) {
		t.Parallel()
		if f.caps.noSchema {
			t.Skip("no tables: the store has no DDL, and CreateSchema has nothing to create")
		}
		require.NotNil(t, f.creators, "flavour %s has no creators: give it storeFlavour.creators", f.name)
		var tries, passes int
		for round := range concurrentRounds {
			t.Run(fmt.Sprint("round-", round), func(t *testing.T) {
				stores := f.creators(t, concurrentCreators)
				errs := make([]error, len(stores))
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i, s := range stores {
					c, ok := s.(schemaCreator)
					require.True(t, ok, "%T has no CreateSchema", s)
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						// Without a tenant in the context, a TenantStore creates every
						// tenant's tables.
						errs[i] = c.CreateSchema(context.Background())
					}()
				}
				close(start)
				wg.Wait()
				for _, err := range errs {
					tries++
					if err == nil {
						passes++
					}
				}
				for i, err := range errs {
					require.NoError(t, err, "creator %d of %d", i, len(stores))
				}
				// Every creator's store now serves: New verifies its tables, and one
				// key is processed once across all of them.
				processed := 0
				for i, s := range stores {
					ib := newTestInbox(t, s, inbox.Config{})
					dup, err := ib.Process(ctx, "billing", "started-together", func(context.Context) error { processed++; return nil })
					require.NoError(t, err, "creator %d", i)
					require.Equal(t, i > 0, dup, "creator %d", i)
				}
				require.Equal(t, 1, processed)
			})
		}
		t.Logf("%s: %d of %d concurrent CreateSchema calls succeeded (%d creators, %d rounds)", f.name, passes, tries, concurrentCreators, concurrentRounds)
	})
}
