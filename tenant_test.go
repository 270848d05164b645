package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// Tenants side by side: the same message ids delivered at once to every tenant, messages
// whose tenant is missing or unknown, and observations per tenant, on every shape.

// tenantAmount is what message id of tenant i credits: a credit routed to another tenant
// changes two balances.
func tenantAmount(i, id int) int { return (i+1)*1000 + id }

func TestTenantsRaceOnTheSameIDs(t *testing.T) {
	t.Parallel()
	for _, shape := range tenantShapes() {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			setup := shape.open(t)
			ts, ledgers := setup.ts, setup.ledgers
			var mu sync.Mutex
			seen := map[string]int{} // tenant/id -> handler runs that committed
			ib := newTestInbox(t, ts, inbox.Config{MaxAttempts: 3, OnMismatch: inbox.Fail})
			handler := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				tenant, _ := inbox.TenantFromContext(msg.Context())
				i, err := tenantIndex(tenant)
				if err != nil {
					return nil, err
				}
				var id int
				_, _ = fmt.Sscanf(msg.UUID, "order-%d", &id)
				if err := tenantLedger(t, msg.Context(), ledgers).credit(msg.Context(), tenantAmount(i, id)); err != nil {
					return nil, err
				}
				return []*message.Message{message.NewMessage(tenant+"-receipt-"+msg.UUID, []byte(tenant))}, nil
			})
			const ids, copies = 8, 3
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, tenant := range tenants {
				for id := range ids {
					for range copies {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							for {
								// The same UUID in every tenant, each with its own content:
								// a key that crossed tenants would be a mismatch (Fail).
								msg := message.NewMessage(fmt.Sprint("order-", id), []byte(tenant))
								msg.Metadata.Set(inbox.DefaultTenantMetadata, tenant)
								out, err := handler(msg)
								if errors.Is(err, inbox.ErrContended) {
									continue // a deadlock or lock timeout: the broker would redeliver
								}
								require.NoError(t, err)
								require.Len(t, out, 1)
								require.Equal(t, tenant+"-receipt-"+msg.UUID, out[0].UUID, "the replay is the tenant's own")
								if msg.Metadata.Get(inbox.MetadataOutcome) == string(inbox.OutcomeProcessed) {
									mu.Lock()
									seen[fmt.Sprint(tenants[i], "/", id)]++
									mu.Unlock()
								}
								return
							}
						}()
					}
				}
			}
			close(start)
			wg.Wait()
			for i, tenant := range tenants {
				want := 0
				for id := range ids {
					want += tenantAmount(i, id)
					require.Equal(t, 1, seen[fmt.Sprint(tenant, "/", id)], "%s order-%d processed once", tenant, id)
				}
				total, credits := ledgers[i].balance(t)
				require.Equal(t, [2]int{want, ids}, [2]int{total, credits}, "%s's ledger", tenant)
				stats, err := ts.Stats(inbox.ContextWithTenant(context.Background(), tenant))
				require.NoError(t, err)
				require.Len(t, stats, 1)
				require.EqualValues(t, ids, stats[0].Keys, "%s's keys", tenant)
			}
			all, err := ts.Stats(context.Background())
			require.NoError(t, err)
			require.EqualValues(t, ids*len(tenants), all[0].Keys, "Stats without a tenant sums the tenants")
		})
	}
}

func TestMissingOrUnknownTenantWritesNothing(t *testing.T) {
	t.Parallel()
	for _, shape := range tenantShapes() {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			setup := shape.open(t)
			ts, ledgers := setup.ts, setup.ledgers
			var observed []inbox.Observation
			var mu sync.Mutex
			ib := newTestInbox(t, ts, inbox.Config{MaxAttempts: 1, Observer: inbox.ObserverFunc(func(_ context.Context, o inbox.Observation) {
				mu.Lock()
				defer mu.Unlock()
				observed = append(observed, o)
			})})
			calls := 0
			handler := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				calls++
				return nil, tenantLedger(t, msg.Context(), ledgers).credit(msg.Context(), 1)
			})
			for _, tc := range []struct {
				name, tenant string
				want         error
				says         []string
			}{
				{"missing", "", inbox.ErrNoTenant, []string{`metadata field "tenant"`, "order-1"}},
				{"unknown", "tenant-x", inbox.ErrUnknownTenant, []string{`tenant "tenant-x"`, `metadata field "tenant"`, "order-1"}},
				{"not a name", "tenant\x00b", inbox.ErrUnknownTenant, []string{"not valid UTF-8 text without control characters"}},
			} {
				for range 2 { // the same on every delivery: permanent
					msg := message.NewMessage("order-1", []byte(`{}`))
					if tc.tenant != "" {
						msg.Metadata.Set(inbox.DefaultTenantMetadata, tc.tenant)
					}
					_, err := handler(msg)
					require.ErrorIs(t, err, tc.want, tc.name)
					for _, s := range tc.says {
						require.Contains(t, err.Error(), s, tc.name)
					}
					require.Equal(t, string(inbox.OutcomeNoTenant), msg.Metadata.Get(inbox.MetadataOutcome))
				}
			}
			require.Zero(t, calls, "no handler ran")
			_, err := ib.Process(context.Background(), "billing", "order-2", func(context.Context) error { calls++; return nil })
			require.ErrorIs(t, err, inbox.ErrNoTenant, "Process without a tenant in its context")
			_, err = ts.Forget(context.Background(), "billing", "order-1")
			require.ErrorIs(t, err, inbox.ErrNoTenant, "Forget without a tenant")
			require.Zero(t, calls)
			for i, tenant := range tenants {
				total, credits := ledgers[i].balance(t)
				require.Zero(t, total+credits, "nothing credited in %s", tenant)
				stats, err := ts.Stats(inbox.ContextWithTenant(context.Background(), tenant))
				require.NoError(t, err)
				require.Empty(t, stats, "no key in %s", tenant)
				if shape.sql { // no attempt started either
					unfinished, err := ts.UnfinishedAttempts(inbox.ContextWithTenant(context.Background(), tenant))
					require.NoError(t, err)
					require.Empty(t, unfinished, "no attempt started in %s", tenant)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, observed, 7, "six deliveries and the Process call")
			for _, o := range observed {
				require.Equal(t, inbox.OutcomeNoTenant, o.Outcome)
				require.Error(t, o.Err)
			}
			require.Equal(t, "tenant-x", observed[2].Tenant, "an unknown tenant is observed under its name")
		})
	}
}

// Config.Tenant's own errors: ErrNoTenant is permanent (OutcomeNoTenant); another error
// stays the function's (a lookup that failed), the message failed and nacked.
func TestTenantFuncErrors(t *testing.T) {
	t.Parallel()
	setup := openPgSchemasShape(t)
	directoryDown := errors.New("tenant directory unreachable")
	for _, tc := range []struct {
		fn      inbox.TenantFunc
		want    error
		outcome inbox.Outcome
	}{
		{func(*message.Message) (string, error) { return "", nil }, inbox.ErrNoTenant, inbox.OutcomeNoTenant},
		{func(*message.Message) (string, error) { return "", directoryDown }, directoryDown, inbox.OutcomeFailed},
	} {
		ib := newTestInbox(t, setup.ts, inbox.Config{Tenant: tc.fn})
		msg := message.NewMessage("order-1", nil)
		_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(msg)
		require.ErrorIs(t, err, tc.want)
		require.Equal(t, string(tc.outcome), msg.Metadata.Get(inbox.MetadataOutcome))
		if tc.want == directoryDown {
			require.NotErrorIs(t, err, inbox.ErrNoTenant, "not made permanent")
		}
	}
}
