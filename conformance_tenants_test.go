package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/outbox"
)

// Where tenants meet the other features (issue 32), on every tenant flavour: the same
// partition and the same key in two tenants, a Lookup that fails, panics or hangs,
// batches without a known tenant, and outbox ids per tenant. inboxhttp behind a
// TenantStore: conformance_tenants_http_test.go. The cases run the case tenant beside
// otherTenant, each writing to its own ledger (fixture.ledgerIn).

// otherTenant is the tenant the cases run beside caseTenant.
const otherTenant = "tenant-a"

// inTenant returns a background context carrying tenant.
func inTenant(tenant string) context.Context {
	return inbox.ContextWithTenant(context.Background(), tenant)
}

// inTenantMsg returns a message naming tenant in the metadata the middleware reads.
func inTenantMsg(tenant, uuid string, payload []byte) *message.Message {
	msg := message.NewMessage(uuid, payload)
	msg.Metadata.Set(inbox.DefaultTenantMetadata, tenant)
	return msg
}

// tenantLedgers returns the case tenant's and otherTenant's ledgers.
func tenantLedgers(t *testing.T, fx fixture) map[string]ledger {
	return map[string]ledger{caseTenant: fx.ledger, otherTenant: fx.ledgerIn(t, otherTenant)}
}

// creditTenant credits amount to the ledger of the tenant ctx carries.
func creditTenant(ctx context.Context, ledgers map[string]ledger, amount int) error {
	tenant, _ := inbox.TenantFromContext(ctx)
	l, ok := ledgers[tenant]
	if !ok {
		return errors.New("no ledger for tenant " + tenant)
	}
	return l.credit(ctx, amount)
}

func exerciseTenantSeams(t *testing.T, f storeFlavour) {
	if f.tenant == "" {
		return
	}

	// Issue 32, defect 1: offset mode kept the partitions in flight by topic and
	// partition alone, so another tenant's record of a partition of the same name was
	// refused with ErrNotInOrder (permanent: a healthy message poisoned).
	t.Run("TenantsSamePartitionInFlight", func(t *testing.T) {
		if f.caps.noOffsets {
			t.Skip("the tenants' store keeps no offsets: OffsetModeRefusedClearly checks the refusal")
		}
		t.Parallel()
		fx := f.open(t, storeOpts{})
		ledgers := tenantLedgers(t, fx)
		ib := newTestInbox(t, fx.store, inbox.Config{Position: positionFromMetadata})
		entered, hold := make(chan struct{}), make(chan struct{})
		release := sync.OnceFunc(func() { close(hold) })
		t.Cleanup(release)
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if tenant, _ := inbox.TenantFromContext(msg.Context()); tenant == caseTenant && msg.Metadata.Get("offset") == "0" {
				close(entered)
				<-hold
			}
			return nil, creditTenant(msg.Context(), ledgers, 1)
		})
		first := make(chan error, 1)
		go func() { _, err := h(f.record("orders", 0, 0)); first <- err }()
		select {
		case <-entered: // the case tenant's orders/0/0 is in its handler
		case err := <-first:
			t.Fatalf("the case tenant's record returned without reaching its handler: %v", err)
		}
		other := record("orders", 0, 0)
		other.Metadata.Set(inbox.DefaultTenantMetadata, otherTenant)
		_, otherErr := h(other)
		_, sameErr := h(f.record("orders", 0, 1)) // the case tenant's own partition is in flight
		release()
		require.NoError(t, <-first)
		require.NoError(t, otherErr, "another tenant's partition of the same name is not the one in flight")
		require.ErrorIs(t, sameErr, inbox.ErrNotInOrder, "the case tenant's own partition is in flight: refused")
		for tenant, l := range ledgers {
			total, _ := l.balance(t)
			require.Equal(t, 1, total, "%s's record applied once", tenant)
		}
		require.Equal(t, int64(1), offsetOf(inTenant(otherTenant), t, ib, "billing", "orders", 0))
	})

	// Issue 32, defect 5: the same key in two tenants gave the same outbox ids, and an
	// inbox downstream with default settings took the second tenant's event for a
	// duplicate of the first's. Also: the remembered keys and the replay hint read the
	// tenant's own row, and each tenant replays its own output.
	t.Run("TenantsSameKey", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		ledgers := tenantLedgers(t, fx)
		logger := newCapturingLogger()
		ib := newTestInbox(t, fx.store, inbox.Config{OnMismatch: inbox.Fail, Logger: logger})
		var mu sync.Mutex
		ids := map[string]string{}
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			tenant, _ := inbox.TenantFromContext(msg.Context())
			claim, _ := inbox.ClaimFromContext(msg.Context())
			if claim.Tenant != tenant {
				return nil, errors.New("the claim names tenant " + claim.Tenant + ", not " + tenant)
			}
			id, err := outbox.MessageIDFromContext(msg.Context(), "CashbackCredited")
			if err != nil {
				return nil, err
			}
			if id != outbox.TenantMessageID(tenant, claim.Consumer, claim.Key, "CashbackCredited") {
				return nil, errors.New("MessageIDFromContext is not TenantMessageID of the claim")
			}
			mu.Lock()
			ids[tenant] = id
			mu.Unlock()
			if err := creditTenant(msg.Context(), ledgers, 1); err != nil {
				return nil, err
			}
			return []*message.Message{message.NewMessage(id, []byte(tenant))}, nil
		})
		for round, want := range []inbox.Outcome{inbox.OutcomeProcessed, inbox.OutcomeReplayed} {
			for _, tenant := range []string{caseTenant, otherTenant} {
				// One UUID in both tenants, with each tenant's content: a key that crossed
				// tenants would be a mismatch (OnMismatch: Fail).
				msg := inTenantMsg(tenant, "order-1", []byte(tenant))
				out, err := h(msg)
				require.NoError(t, err, "%s, round %d", tenant, round)
				require.Equal(t, string(want), msg.Metadata.Get(inbox.MetadataOutcome), "%s, round %d", tenant, round)
				require.Len(t, out, 1)
				require.Equal(t, tenant, string(out[0].Payload), "the replay is the tenant's own")
			}
		}
		require.NotEqual(t, ids[caseTenant], ids[otherTenant], "the same key in two tenants: two messages, two ids")
		logged := map[any]int{} // a log line naming a key names its tenant
		for _, l := range logger.all() {
			if l.msg == "inbox: duplicate skipped" {
				logged[l.fields["tenant"]]++
			}
		}
		require.Equal(t, map[any]int{caseTenant: 1, otherTenant: 1}, logged)

		// An inbox downstream, with default settings (keys from the UUID), gets both events.
		down := newTestInbox(t, fx.store, inbox.Config{Consumer: "downstream"})
		processed := 0
		dh := down.Middleware(func(*message.Message) ([]*message.Message, error) { processed++; return nil, nil })
		for _, tenant := range []string{caseTenant, otherTenant} {
			_, err := dh(f.message(ids[tenant], nil))
			require.NoError(t, err)
		}
		require.Equal(t, 2, processed, "each tenant's event is a message of its own downstream")

		// A delivery hinted as a replay reads its own tenant's row: the key the case
		// tenant committed is new in the other.
		_, err := creditOnce(inTenant(caseTenant), ib, ledgers[caseTenant], "billing", "order-2", 1)
		require.NoError(t, err)
		dup, err := creditOnce(inbox.ContextWithReplayHint(inTenant(otherTenant)), ib, ledgers[otherTenant], "billing", "order-2", 1)
		require.NoError(t, err)
		require.False(t, dup, "a key of another tenant is new, hinted or not")
		for tenant, l := range ledgers {
			total, _ := l.balance(t)
			require.Equal(t, 2, total, "%s: each key once", tenant)
		}
	})

	// Attempts are counted in the tenant's own store: a crash of a key in one tenant does
	// not count against the same key in another.
	t.Run("TenantsAttemptsPerTenant", func(t *testing.T) {
		if f.caps.noAttemptCount {
			t.Skip("the tenants' store counts no attempts")
		}
		t.Parallel()
		fx := f.open(t, storeOpts{})
		f.skipRefusedAttempts(t, fx.store)
		require.Zero(t, crashedAttempt(t, inTenant(caseTenant), fx.store, "billing", "order-1"))
		require.Zero(t, crashedAttempt(t, inTenant(otherTenant), fx.store, "billing", "order-1"), "the case tenant's crash is not the other's")
		require.Equal(t, 1, crashedAttempt(t, inTenant(caseTenant), fx.store, "billing", "order-1"))
	})

	exerciseLookupFaults(t, f)

	// Issue 32, defect 6: a batch without a tenant, or with an unknown one, was
	// observed as failed, where a single message is no_tenant. ProcessOffsets takes the
	// same path.
	t.Run("TenantBatchesWithoutAKnownTenant", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		obs := &observations{}
		ib := newTestInbox(t, fx.store, inbox.Config{Observer: obs})
		calls := 0
		fn := func(context.Context, []int) error { calls++; return nil }
		for _, tc := range []struct {
			name    string
			ctx     context.Context
			its     []inbox.Item
			want    error
			offsets bool // the case applies to ProcessOffsets too (its tenant is the context's)
		}{
			{"no tenant", context.Background(), items("k1", "k2"), inbox.ErrNoTenant, true},
			{"an unknown tenant in the context", inTenant("tenant-x"), items("k1", "k2"), inbox.ErrUnknownTenant, true},
			{"an unknown tenant the items name", context.Background(), []inbox.Item{{Key: "k1", Tenant: "tenant-x"}, {Key: "k2"}}, inbox.ErrUnknownTenant, false},
		} {
			check := func(call string, err error) {
				t.Helper()
				require.ErrorIs(t, err, tc.want, "%s: %s", call, tc.name)
				require.True(t, inbox.Permanent(err))
				seen := obs.take()
				require.Len(t, seen, 2, "%s: %s: one observation per message", call, tc.name)
				for _, s := range seen {
					require.Equal(t, inbox.OutcomeNoTenant, s.o.Outcome, "%s: %s: as for a single message", call, tc.name)
					require.ErrorIs(t, s.o.Err, tc.want)
				}
			}
			_, err := ib.ProcessBatch(tc.ctx, "billing", tc.its, fn)
			check("ProcessBatch", err)
			if tc.offsets && !f.caps.noOffsets {
				_, err = ib.ProcessOffsets(tc.ctx, "billing", at("orders", 0, 1, 2), fn)
				check("ProcessOffsets", err)
			}
		}
		require.Zero(t, calls)
		// The case tenant named by the items alone: the batch runs there.
		got, _, err := creditBatch(context.Background(), ib, fx.ledger, "billing", []inbox.Item{{Key: "k1", Tenant: caseTenant}, {Key: "k2"}}, 1)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1}, got)
		total, _ := fx.ledger.balance(t)
		require.Equal(t, 2, total)
	})
}

// lookupFault is a way a tenant's Lookup goes wrong, for exerciseLookupFaults.
type lookupFault struct {
	name string
	// says is what the caller's error says.
	says []string
	// openTimeout is the TenantStore's, for a Lookup that hangs.
	openTimeout time.Duration
	// fault runs in place of the tenant's Lookup while armed; open is the real one.
	fault func(t *testing.T, f *armedLookup, open func() (inbox.Tenant, error)) (inbox.Tenant, error)
}

// armedLookup makes the Lookups of caseTenant fail as fault does while it is armed; the
// other tenants' open as usual. It counts the case tenant's Lookups while armed.
type armedLookup struct {
	t       *testing.T
	fault   lookupFault
	armed   atomic.Bool
	lookups atomic.Int32
	// release lets a hanging Lookup return; returned is set once it did, and lateClosed
	// closed when what it returned was closed.
	release    chan struct{}
	returned   atomic.Bool
	lateClosed chan struct{}
}

func newArmedLookup(t *testing.T, fault lookupFault) *armedLookup {
	a := &armedLookup{t: t, fault: fault, release: make(chan struct{}), lateClosed: make(chan struct{})}
	t.Cleanup(a.letGo) // a failed check must not leave the Lookup hanging
	return a
}

func (a *armedLookup) letGo() {
	select {
	case <-a.release:
	default:
		close(a.release)
	}
}

// opts are the tenant flavour's options that run Lookups through a.
func (a *armedLookup) opts() storeOpts {
	return storeOpts{openTimeout: a.fault.openTimeout, lookup: a.lookup}
}

// lookup is storeOpts.lookup.
func (a *armedLookup) lookup(_ context.Context, tenant string, open func() (inbox.Tenant, error)) (inbox.Tenant, error) {
	if tenant != caseTenant || !a.armed.Load() {
		return open()
	}
	a.lookups.Add(1)
	return a.fault.fault(a.t, a, open)
}

func lookupFaults() []lookupFault {
	directoryDown := errors.New("tenant directory unreachable")
	return []lookupFault{
		{name: "Fails", says: []string{directoryDown.Error(), "the next call tries again"},
			fault: func(*testing.T, *armedLookup, func() (inbox.Tenant, error)) (inbox.Tenant, error) {
				return inbox.Tenant{}, directoryDown
			}},
		// Issue 32, defect 3: the panic killed the process.
		{name: "Panics", says: []string{"panicked at conformance_tenants_test.go:", "assignment to entry in nil map"},
			fault: func(*testing.T, *armedLookup, func() (inbox.Tenant, error)) (inbox.Tenant, error) {
				var directory map[string]string
				//lint:ignore SA5000 the lookup panics on purpose, with the runtime error of a directory not loaded yet
				directory[caseTenant] = "dsn"
				return inbox.Tenant{}, nil
			}},
		// Issue 32, defect 4: a Lookup that ignores its context held its callers until it
		// returned, whatever OpenTimeout said.
		{name: "Hangs", says: []string{"OpenTimeout"}, openTimeout: time.Second,
			fault: func(t *testing.T, a *armedLookup, open func() (inbox.Tenant, error)) (inbox.Tenant, error) {
				select { // deaf to its context
				case <-a.release:
				case <-time.After(30 * time.Second): // the unfixed store waits this long: the check below fails
				}
				a.returned.Store(true)
				tenant, err := open()
				closeTenant := tenant.Close
				tenant.Close = func() {
					if closeTenant != nil {
						closeTenant()
					}
					close(a.lateClosed)
				}
				return tenant, err
			}},
	}
}

// exerciseLookupFaults: a Lookup that fails, panics or hangs fails its callers with a
// transient error, writes nothing, and is not cached: the next delivery looks the
// tenant up again and is processed.
func exerciseLookupFaults(t *testing.T, f storeFlavour) {
	for _, fault := range lookupFaults() {
		t.Run("TenantLookup"+fault.name, func(t *testing.T) {
			t.Parallel()
			lookup := newArmedLookup(t, fault)
			fx := f.open(t, lookup.opts())
			obs := &observations{}
			ib := newTestInbox(t, fx.store, inbox.Config{Observer: obs}) // New opens every tenant (Verify)
			require.NoError(t, fx.store.(*inbox.TenantStore).Remove(context.Background(), caseTenant), "the next call looks the tenant up")
			calls := 0
			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				calls++
				return nil, fx.ledger.credit(msg.Context(), 1)
			})
			// The first delivery's Lookups (the consumer name check's, then the claim's)
			// go wrong.
			lookup.armed.Store(true)
			msg := f.message("order-1", nil)
			_, err := h(msg)
			require.False(t, lookup.returned.Load(), "the call returned only after the Lookup it should have given up on")
			require.Error(t, err)
			for _, s := range fault.says {
				require.Contains(t, err.Error(), s)
			}
			require.NotErrorIs(t, err, inbox.ErrUnknownTenant)
			require.False(t, inbox.Permanent(err), "transient: the message is nacked and comes again")
			require.Equal(t, string(inbox.OutcomeFailed), msg.Metadata.Get(inbox.MetadataOutcome))
			require.Equal(t, inbox.OutcomeFailed, obs.one(t).o.Outcome)
			if fault.openTimeout > 0 {
				// The abandoned Lookup still runs: the next call fails as well, without a
				// second Lookup of the tenant; once it returned, what it opened is closed.
				_, err := h(f.message("order-1", nil))
				require.Error(t, err)
				require.Contains(t, err.Error(), "has not returned")
				require.EqualValues(t, 1, lookup.lookups.Load(), "one Lookup of a tenant at a time")
				lookup.armed.Store(false)
				lookup.letGo()
				select {
				case <-lookup.lateClosed:
				case <-time.After(30 * time.Second):
					t.Fatal("what the abandoned Lookup returned was never closed (Tenant.Close)")
				}
			}
			require.Zero(t, calls)
			total, _ := fx.ledger.balance(t)
			require.Zero(t, total)

			lookup.armed.Store(false) // the directory is back
			_, err = h(f.message("order-1", nil))
			require.NoError(t, err, "nothing was cached: the tenant is looked up again")
			require.Equal(t, 1, calls)
			total, _ = fx.ledger.balance(t)
			require.Equal(t, 1, total)
		})
	}
}
