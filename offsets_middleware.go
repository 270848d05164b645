package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// The middleware in offset mode (Config.Position): each message is claimed by its
// position, in its partition's row, through the same steps as a key (process), so that
// observations, the commit with the produced messages and the duplicate modes are the
// same. It counts no attempts: New refuses MaxAttempts with Position (ADR 108).

// validateOffsets checks the fields of offset mode.
func (c *Config) validateOffsets() []error {
	var errs []error
	if c.Position != nil {
		if _, ok := c.Store.(OffsetStore); c.Store != nil && !ok {
			errs = append(errs, fmt.Errorf("Position is set, but the store (%T) keeps no offsets (inbox.OffsetStore): use a PostgreSQL, MySQL or SQLite store, or key mode (leave Position nil)", c.Store))
		}
		if c.Key != nil {
			errs = append(errs, errors.New("Key and Position are both set: offset mode judges messages by their position, key mode by their key; set one"))
		}
		if c.Fingerprint != nil {
			errs = append(errs, errors.New("Fingerprint and Position are both set: offset mode stores no fingerprint; leave Fingerprint nil"))
		}
		if c.MaxAttempts > 0 {
			errs = append(errs, fmt.Errorf("MaxAttempts is %d and Position is set: offset mode counts no attempts (a record's position is not claimed as a key, so no attempt would ever be counted); set MaxAttempts to 0. A record whose handler fails is retried and poisoned as in key mode (middleware.Retry, PoisonQueue); one that crashes the process every time stops its partition: skip it with `inbox offsets reset --to <its offset + 1>` (see docs/kafka.md), or use key mode (Key, leaving Position nil) where MaxAttempts counts crashes", c.MaxAttempts))
		}
	}
	if c.MaxOffsetRewind < 0 {
		errs = append(errs, fmt.Errorf("MaxOffsetRewind is %d: use 0 for no bound, or a positive number of offsets", c.MaxOffsetRewind))
	}
	return errs
}

// verifyOffsets checks, in offset mode, the store's offsets table.
func (c *Config) verifyOffsets(ctx context.Context) error {
	if c.Position == nil {
		return nil
	}
	return c.Store.(OffsetStore).VerifyOffsets(ctx)
}

// positionRecord derives, in offset mode, the record of msg: its position, and the
// position's text as its key.
func (ib *Inbox) positionRecord(msg *message.Message, rec Record) (Record, Outcome, error) {
	pos, err := ib.cfg.Position(msg)
	switch {
	case err != nil:
		return rec, OutcomeNoKey, err
	case pos.Topic == "":
		return rec, OutcomeNoKey, fmt.Errorf("%w: the position function returned no topic", ErrNoKey)
	case pos.Partition < 0 || pos.Offset < 0:
		return rec, OutcomeNoKey, fmt.Errorf("%w: the position function returned partition %d, offset %d: neither may be negative", ErrNoKey, pos.Partition, pos.Offset)
	}
	rec.Key, rec.Position = pos.String(), &pos
	return rec, "", nil
}

// claim claims rec in a new transaction, or in joined when it is not nil: its key, or
// in offset mode its position. A duplicate position's transaction is ended here, as a
// store ends a duplicate key's.
func (ib *Inbox) claim(ctx context.Context, joined any, rec Record) (Claim, error) {
	if rec.Position == nil {
		if joined != nil {
			return ib.cfg.Store.ClaimIn(ctx, joined, rec)
		}
		return ib.cfg.Store.Claim(ctx, rec)
	}
	positions := []Position{*rec.Position}
	parts, _, err := groupPositions(positions)
	if err != nil {
		return Claim{}, err
	}
	v, err := ib.claimPartitions(ctx, ib.cfg.Store.(OffsetStore), joined, rec.Consumer, positions, parts)
	if err != nil {
		var itemErr *BatchItemError
		if errors.As(err, &itemErr) {
			err = itemErr.Err
		}
		return Claim{}, contract.Join(err, rollbackIf(ctx, v.tx))
	}
	if v.dup[0] {
		return Claim{Duplicate: true, Output: v.output}, rollbackIf(ctx, v.tx)
	}
	return Claim{Tx: v.tx}, nil
}

// enterPartition marks, in offset mode, the partition of msg in flight in its tenant
// (ctx's), or refuses msg while another message of that partition is in the middleware:
// in-order delivery, one message at a time per partition, is what makes a stored offset
// mean "everything below was processed". It catches subscribers that deliver a partition
// concurrently, and middlewares that ack before the handler returns (InstantAck) in
// front of a subscriber that waits for the ack: a message acked before it got here is
// refused even when the next one does not overlap it (watermill-kafka cancels an acked
// message's context, so it would otherwise fail as a cancelled one, and be lost).
//
// A partition is a tenant's: each tenant keeps its own offsets, and two tenants may
// read partitions of the same name (a cluster each) at the same time (ADR 143). The
// tenant is known here, after Config.Tenant ran; leave ends the mark.
func (ib *Inbox) enterPartition(ctx context.Context, msg *message.Message, rec Record) (leave func(), err error) {
	tenant, _ := TenantFromContext(ctx)
	leave, err = ib.inFlight.enter(tenant, rec)
	if err == nil && acked(msg) { // after enter: two such messages may overlap, and either error says it
		leave()
		err = fmt.Errorf("%w: the message was acked before it reached the inbox middleware, so the subscriber moves on to the partition's next message before this one is processed: remove the middleware that acks early (InstantAck) from in front of the inbox",
			ErrNotInOrder)
	}
	if err != nil {
		ib.cfg.Logger.Error("inbox: message refused: its partition is not delivered one message at a time, in order", err,
			withTenant(ctx, watermill.LogFields{"consumer": rec.Consumer, "record": rec.Key, "message_uuid": msg.UUID}))
		err = contract.Wrap(messageName(msg)+": consumer "+fmt.Sprintf("%q", rec.Consumer)+" record "+rec.Key, err)
		ib.observe(ctx, rec, msg, OutcomeFailed, 0, err)
		return nil, err
	}
	return leave, nil
}

// acked reports whether msg was acked already.
func acked(msg *message.Message) bool {
	select {
	case <-msg.Acked():
		return true
	default:
		return false
	}
}

// partitionsInFlight are the partitions, per tenant and consumer, with a message in the
// middleware.
type partitionsInFlight struct {
	mu sync.Mutex
	in map[partitionKey]int64 // the offset in flight
}

type partitionKey struct {
	tenant, consumer, topic string
	partition               int32
}

// enter marks rec's partition of tenant ("" without one) in flight, or refuses it when
// it is already.
func (p *partitionsInFlight) enter(tenant string, rec Record) (leave func(), err error) {
	k := partitionKey{tenant, rec.Consumer, rec.Position.Topic, rec.Position.Partition}
	p.mu.Lock()
	defer p.mu.Unlock()
	if offset, busy := p.in[k]; busy {
		return nil, fmt.Errorf("%w: offset %d of the partition is still in the inbox middleware: the subscriber delivers a partition's messages concurrently, or a middleware acks them before the handler returns (InstantAck)",
			ErrNotInOrder, offset)
	}
	if p.in == nil {
		p.in = map[partitionKey]int64{}
	}
	p.in[k] = rec.Position.Offset
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.in, k)
	}, nil
}
