package inbox

import (
	"context"
	"errors"
	"fmt"
)

// The optional abilities of TenantStore (ADR 87): batches, offset mode and the consumer
// name check, each handed over to the store of the tenant in ctx when that store has the
// ability, and refused with errors.ErrUnsupported, naming the tenant and its store,
// when it has not. A batch runs on one tenant: Inbox.ProcessBatch refuses one whose
// items name different tenants (ErrMixedTenants) before anything is claimed.

var (
	_ BatchStore         = (*TenantStore)(nil)
	_ OffsetStore        = (*TenantStore)(nil)
	_ ConsumerNeighbours = (*TenantStore)(nil)
)

// ErrMixedTenants means the messages of one batch name different tenants (Item.Tenant,
// or an item's tenant other than the one in the context): a batch is one transaction on
// one tenant's database. Nothing was claimed or processed in any tenant. Split the batch
// by tenant and call once per tenant. Permanent: the same batch fails the same way.
var ErrMixedTenants = errors.New("batch of several tenants")

// ability returns the store of the tenant in ctx as an A, with a reference taken (the
// caller ends it with inFlight.Done), or an error wrapping errors.ErrUnsupported when
// that store lacks the ability.
func ability[A any](s *TenantStore, ctx context.Context, doing, what string) (*tenantEntry, A, error) {
	var none A
	e, err := s.use(ctx, doing)
	if err != nil {
		return nil, none, err
	}
	a, ok := e.t.Store.(A)
	if !ok {
		e.inFlight.Done()
		return nil, none, e.wrap(fmt.Errorf("%w: its store (%T) %s", errors.ErrUnsupported, e.t.Store, what))
	}
	return e, a, nil
}

const (
	noBatches = "does not claim batches (inbox.BatchStore): process the messages one by one with Process"
	noOffsets = "keeps no offsets (inbox.OffsetStore): use key mode"
)

// ClaimBatch implements BatchStore on the store of the tenant in ctx.
func (s *TenantStore) ClaimBatch(ctx context.Context, recs []Record) (BatchClaim, error) {
	e, store, err := ability[BatchStore](s, ctx, "claiming the keys", noBatches)
	if err != nil {
		return BatchClaim{}, err
	}
	claim, err := store.ClaimBatch(ctx, recs)
	c, err := e.hold(Claim{Tx: claim.Tx}, err)
	claim.Tx = c.Tx
	return claim, err
}

// ClaimBatchIn implements BatchStore on the store of the tenant in ctx. tx must be a
// transaction on that tenant's database (see TenantStore). The reference on the
// tenant's store ends with the call: the transaction is the caller's.
func (s *TenantStore) ClaimBatchIn(ctx context.Context, tx any, recs []Record) (BatchClaim, error) {
	e, store, err := ability[BatchStore](s, ctx, "claiming the keys", noBatches)
	if err != nil {
		return BatchClaim{}, err
	}
	defer e.inFlight.Done()
	claim, err := store.ClaimBatchIn(ctx, tx, recs)
	return claim, e.wrap(err)
}

// ClaimOffsets implements OffsetStore on the store of the tenant in ctx.
func (s *TenantStore) ClaimOffsets(ctx context.Context, consumer string, spans []OffsetSpan) (OffsetClaim, error) {
	e, store, err := ability[OffsetStore](s, ctx, "moving the offsets", noOffsets)
	if err != nil {
		return OffsetClaim{}, err
	}
	claim, err := store.ClaimOffsets(ctx, consumer, spans)
	c, err := e.hold(Claim{Tx: claim.Tx}, err)
	claim.Tx = c.Tx
	return claim, err
}

// ClaimOffsetsIn implements OffsetStore on the store of the tenant in ctx, in tx (see
// ClaimBatchIn).
func (s *TenantStore) ClaimOffsetsIn(ctx context.Context, tx any, consumer string, spans []OffsetSpan) (OffsetClaim, error) {
	e, store, err := ability[OffsetStore](s, ctx, "moving the offsets", noOffsets)
	if err != nil {
		return OffsetClaim{}, err
	}
	defer e.inFlight.Done()
	claim, err := store.ClaimOffsetsIn(ctx, tx, consumer, spans)
	return claim, e.wrap(err)
}

// Offsets implements OffsetStore: the offsets stored in the tenant in ctx. Without a
// tenant it fails with ErrNoTenant: offsets are per tenant, and a list of several would
// not say whose each is.
func (s *TenantStore) Offsets(ctx context.Context, consumer string) ([]PartitionOffset, error) {
	e, store, err := ability[OffsetStore](s, ctx, "reading the offsets", noOffsets)
	if err != nil {
		return nil, err
	}
	defer e.inFlight.Done()
	offsets, err := store.Offsets(ctx, consumer)
	return offsets, e.wrap(err)
}

// SetOffset implements OffsetStore in the tenant in ctx.
func (s *TenantStore) SetOffset(ctx context.Context, consumer, topic string, partition int32, next int64) (bool, error) {
	e, store, err := ability[OffsetStore](s, ctx, "setting the offset", noOffsets)
	if err != nil {
		return false, err
	}
	defer e.inFlight.Done()
	found, err := store.SetOffset(ctx, consumer, topic, partition, next)
	return found, e.wrap(err)
}

// VerifyOffsets implements OffsetStore: it checks the offsets table of the tenant in
// ctx or, without one, of every tenant TenantConfig.Tenants lists (none when it is nil),
// as Verify does.
func (s *TenantStore) VerifyOffsets(ctx context.Context) error {
	if _, ok := TenantFromContext(ctx); ok {
		e, store, err := ability[OffsetStore](s, ctx, "checking the offsets table", noOffsets)
		if err != nil {
			return err
		}
		defer e.inFlight.Done()
		return e.wrap(store.VerifyOffsets(ctx))
	}
	if s.cfg.Tenants == nil {
		return nil
	}
	return s.ForEachTenant(ctx, func(ctx context.Context, _ string, store Store) error {
		o, ok := store.(OffsetStore)
		if !ok {
			return fmt.Errorf("%w: its store (%T) %s", errors.ErrUnsupported, store, noOffsets)
		}
		return o.VerifyOffsets(ctx)
	})
}

// NeighbourConsumers implements ConsumerNeighbours on the store of the tenant in ctx
// (the middleware checks a consumer name once per Inbox, in the tenant of its first
// message); a tenant whose store cannot tell fails with errors.ErrUnsupported, which
// the check logs at debug level.
func (s *TenantStore) NeighbourConsumers(ctx context.Context, consumer string) ([]string, error) {
	e, store, err := ability[ConsumerNeighbours](s, ctx, "reading the consumer names", "cannot tell cheaply whether a consumer name is new (inbox.ConsumerNeighbours)")
	if err != nil {
		return nil, err
	}
	defer e.inFlight.Done()
	others, err := store.NeighbourConsumers(ctx, consumer)
	return others, e.wrap(err)
}
