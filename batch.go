package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Item is one message of a batch, as Inbox.ProcessBatch keys it.
type Item struct {
	// Key identifies the message across redeliveries, as a KeyFunc's result does. An
	// empty key refuses the batch (ErrNoKey).
	Key string
	// Fingerprint identifies the message's content: it is stored with a new key, and a
	// duplicate whose stored fingerprint differs is a mismatch (Config.OnMismatch). Nil:
	// none, never compared.
	Fingerprint []byte
	// Tenant is the message's tenant, for a store that routes by tenant (TenantStore):
	// the batch runs on the one tenant its items name, or on the context's
	// (ContextWithTenant) when none names one. Items that name different tenants, or
	// another than the context's, refuse the batch with ErrMixedTenants, before
	// anything is claimed. Empty: the batch's.
	Tenant string
}

// BatchResult is what a batch call (Inbox.ProcessBatch, ProcessBatchOf,
// Inbox.ProcessOffsets, ProcessOffsetsOf) did with each message of the batch.
type BatchResult struct {
	// Duplicate[i] reports that the i-th message had been processed before, in an
	// earlier batch, alone, or earlier in the same batch: fn did not get it.
	Duplicate []bool
	// Processed is how many messages fn got; they committed with its writes.
	Processed int
}

// BatchItemError is the error of a batch refused because of one of its messages, before
// anything was processed: its key could not be derived (ErrNoKey), it is a duplicate
// whose fingerprint differs with Config.OnMismatch set to Fail (ErrDuplicate and
// ErrFingerprintMismatch), it names another tenant than the batch's (ErrMixedTenants),
// or, in offset mode, its position (ErrNoKey, ErrNotInOrder, ErrOffsetRewound). The whole batch failed: route that message away (a dead-letter
// topic) and call again with the others. Whether a retry can help is the wrapped
// error's.
type BatchItemError struct {
	// Index is the message's index in the batch.
	Index int
	// Err says what is wrong with it.
	Err error
}

func (e *BatchItemError) Error() string {
	return fmt.Sprintf("%smessage %d of the batch: %s", contract.Prefix, e.Index, contract.Bare(e.Err))
}

// Unwrap returns Err.
func (e *BatchItemError) Unwrap() error { return e.Err }

// ProcessBatch runs fn once, in one transaction, with the messages of items whose keys
// are new for consumer, and commits their keys with fn's writes: a batch claimed in one
// statement where the store allows (see BatchStore). fresh holds their indexes in
// items, in order; fn writes through the transaction ctx carries (TxFromContext), as a
// handler behind Process does. fn is not called when no message is new.
//
// A message whose key another transaction holds is waited for, as with Process; one
// whose key was processed before (in a batch or alone: they share one key space), or
// that repeats a key earlier in items, is a duplicate: fn does not get it and
// BatchResult.Duplicate says so. fn's error, or a panic, rolls everything back, keys
// included, and is returned unchanged: a retry of the same items gets the same new
// messages. Config.OnDuplicate does not apply, and a batch stores no output: a
// duplicate replays nothing (emit messages through the outbox, in fn's transaction).
//
// The batch is refused, before anything is processed, with a *BatchItemError naming
// the message, when an item has no key, or when a duplicate's fingerprint differs from
// the stored one and Config.OnMismatch is Fail (with Replay or Skip it is logged and
// skipped as a duplicate). A transaction in ctx (ContextWithTx) is joined, as by the
// middleware. Config.MaxAttempts cannot count a batch's attempts per message: a batch
// call on an Inbox with MaxAttempts set fails with an error wrapping
// errors.ErrUnsupported, as does a store that is not a BatchStore. Observations are per
// message.
func (ib *Inbox) ProcessBatch(ctx context.Context, consumer string, items []Item, fn func(ctx context.Context, fresh []int) error) (BatchResult, error) {
	res := BatchResult{Duplicate: make([]bool, len(items))}
	store, err := ib.batchStore(consumer)
	if err != nil || len(items) == 0 {
		return res, err
	}
	keys := make([]string, len(items))
	for i, it := range items {
		if it.Key == "" {
			return res, ib.refuseBatch(ctx, consumer, keys, i, OutcomeNoKey, 0, fmt.Errorf("consumer %q: %w: the key is empty", consumer, ErrNoKey))
		}
		keys[i] = contract.StorableKey(it.Key)
	}
	ctx, bad, err := batchTenant(ctx, items)
	if err != nil {
		return res, ib.refuseBatch(ctx, consumer, keys, bad, OutcomeNoTenant, 0, fmt.Errorf("consumer %q: %w", consumer, err))
	}
	b := newBatchKeys(consumer, items, keys)

	verdict := func(ctx context.Context, joined any) (batchVerdict, error) {
		var claim BatchClaim
		var err error
		if joined != nil {
			claim, err = store.ClaimBatchIn(ctx, joined, b.recs)
		} else {
			claim, err = store.ClaimBatch(ctx, b.recs)
		}
		if err != nil {
			return batchVerdict{}, err
		}
		if len(claim.Duplicate) != len(b.recs) || len(claim.Fingerprint) != len(b.recs) {
			return batchVerdict{tx: claim.Tx}, fmt.Errorf("inbox: the store answered %d verdicts for %d keys", len(claim.Duplicate), len(b.recs))
		}
		return b.verdict(items, claim), nil
	}
	return ib.runBatch(ctx, consumer, keys, verdict, fn)
}

// ProcessBatchOf is ProcessBatch for a batch of any type, e.g. the records a Kafka
// client polled: item derives each message's key (and fingerprint), and fn gets the
// new messages themselves, in order. An item error refuses the batch before anything is
// processed (a *BatchItemError wrapping it: make item's errors wrap ErrNoKey).
func ProcessBatchOf[T any](ctx context.Context, ib *Inbox, consumer string, batch []T, item func(T) (Item, error), fn func(ctx context.Context, fresh []T) error) (BatchResult, error) {
	items := make([]Item, len(batch))
	for i, m := range batch {
		it, err := item(m)
		if err == nil && it.Key == "" {
			err = fmt.Errorf("%w: the key function returned an empty key", ErrNoKey)
		}
		if err != nil {
			return BatchResult{Duplicate: make([]bool, len(batch))}, ib.refuseBatch(ctx, consumer, make([]string, len(batch)), i, OutcomeNoKey, 0, err)
		}
		items[i] = it
	}
	return ib.ProcessBatch(ctx, consumer, items, func(ctx context.Context, fresh []int) error {
		return fn(ctx, pick(batch, fresh))
	})
}

// batchTenant returns ctx carrying the tenant the batch's items name (Item.Tenant), if
// any: one tenant, the context's when it carries one. Otherwise it returns the index of
// the first item that names another, and an error wrapping ErrMixedTenants.
func batchTenant(ctx context.Context, items []Item) (context.Context, int, error) {
	tenant, _ := TenantFromContext(ctx)
	from, named := "the context's (inbox.ContextWithTenant)", false
	for i, it := range items {
		switch {
		case it.Tenant == "" || it.Tenant == tenant:
		case tenant == "":
			tenant, from, named = it.Tenant, fmt.Sprintf("message %d's", i), true
		default:
			return ctx, i, fmt.Errorf("%w: the message names tenant %q, and %s is %q: a batch is one transaction on one tenant's database; split the batch by tenant", ErrMixedTenants, it.Tenant, from, tenant)
		}
	}
	if named {
		ctx = ContextWithTenant(ctx, tenant)
	}
	return ctx, 0, nil
}

// pick returns batch's elements at the indexes.
func pick[T any](batch []T, indexes []int) []T {
	out := make([]T, len(indexes))
	for i, j := range indexes {
		out[i] = batch[j]
	}
	return out
}

// batchStore returns the store as a BatchStore, or why a batch cannot run on it.
func (ib *Inbox) batchStore(consumer string) (BatchStore, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if ib.cfg.MaxAttempts > 0 {
		return nil, fmt.Errorf("inbox: consumer %q: %w: Config.MaxAttempts counts attempts per message, outside the handler's transaction, which a batch cannot do in one statement: use an Inbox without MaxAttempts for batches (it may share the store)", consumer, errors.ErrUnsupported)
	}
	store, ok := ib.cfg.Store.(BatchStore)
	if !ok {
		return nil, fmt.Errorf("inbox: consumer %q: %w: the store (%T) does not claim batches (inbox.BatchStore): process the messages one by one with Process", consumer, errors.ErrUnsupported, ib.cfg.Store)
	}
	return store, nil
}

// batchKeys are a batch's distinct keys, sorted, and where each item's key is.
type batchKeys struct {
	recs  []Record // distinct keys, sorted byte-wise
	slot  []int    // item i's key is recs[slot[i]]
	first []int    // recs[j] stands for items[first[j]], the first item with its key
}

func newBatchKeys(consumer string, items []Item, keys []string) batchKeys {
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return bytes.Compare([]byte(keys[a]), []byte(keys[b])) })
	b := batchKeys{slot: make([]int, len(items))}
	for _, i := range order {
		if n := len(b.recs); n == 0 || b.recs[n-1].Key != keys[i] {
			b.recs = append(b.recs, Record{Consumer: consumer, Key: keys[i], Fingerprint: items[i].Fingerprint})
			b.first = append(b.first, i)
		}
		b.slot[i] = len(b.recs) - 1
	}
	return b
}

// verdict turns a store's claim of the distinct keys into one per item: an item is new
// when its key is and it is the first with it; a duplicate is a mismatch when its
// fingerprint differs from the stored one (or from the first item's with its key).
func (b batchKeys) verdict(items []Item, claim BatchClaim) batchVerdict {
	v := batchVerdict{tx: claim.Tx, dup: make([]bool, len(items)), mismatch: make([]bool, len(items))}
	for i, it := range items {
		j := b.slot[i]
		stored := claim.Fingerprint[j]
		if !claim.Duplicate[j] {
			if b.first[j] == i {
				continue
			}
			stored = items[b.first[j]].Fingerprint
		}
		v.dup[i] = true
		v.mismatch[i] = it.Fingerprint != nil && stored != nil && !bytes.Equal(it.Fingerprint, stored)
	}
	return v
}

// batchVerdict is a claimed batch: per item, whether it is a duplicate and whether its
// fingerprint (or its position, in offset mode) refuses it.
type batchVerdict struct {
	tx       Tx // open when some item is new
	dup      []bool
	mismatch []bool
	// output is a duplicate's stored output, for the middleware in offset mode (the
	// last processed record of its partition); nil otherwise.
	output []byte
}

// runBatch claims a batch with claim (in the transaction ctx carries, if any), skips its
// duplicates, runs fn with the new items in the claimed transaction and commits. keys
// name the items in observations.
func (ib *Inbox) runBatch(ctx context.Context, consumer string, keys []string, claim func(ctx context.Context, joined any) (batchVerdict, error),
	fn func(ctx context.Context, fresh []int) error) (BatchResult, error) {
	res := BatchResult{Duplicate: make([]bool, len(keys))}
	if err := ctx.Err(); err != nil { // nothing is sent on a context that ended
		return res, ib.failBatch(ctx, consumer, keys, nil, 0, OutcomeFailed, context.Cause(ctx))
	}
	start := time.Now()
	v, err := claim(ctx, contract.TxFromContext(ctx))
	wait := time.Since(start)
	var itemErr *BatchItemError
	switch {
	case errors.As(err, &itemErr): // one message refuses the batch (offset mode: its position)
		return res, contract.Join(ib.refuseBatch(ctx, consumer, keys, itemErr.Index, OutcomeFailed, wait, itemErr.Err), rollbackIf(ctx, v.tx))
	case err != nil:
		outcome := failedOutcome(err)
		if tenantError(err) { // no tenant, or an unknown one: refused before anything was written, as a single message
			outcome = OutcomeNoTenant
		}
		return res, contract.Join(ib.failBatch(ctx, consumer, keys, nil, wait, outcome, err), rollbackIf(ctx, v.tx))
	}
	for i, mismatch := range v.mismatch {
		if !mismatch {
			continue
		}
		fields := withTenant(ctx, watermill.LogFields{"consumer": consumer, "key": keys[i], "batch_index": i})
		ib.cfg.Logger.Error("inbox: duplicate key with a different fingerprint", ErrFingerprintMismatch, fields)
		if ib.cfg.OnMismatch == Fail {
			err := fmt.Errorf("consumer %q key %q: %w", consumer, keys[i], errors.Join(ErrDuplicate, ErrFingerprintMismatch))
			return res, contract.Join(ib.refuseBatch(ctx, consumer, keys, i, OutcomeMismatch, wait, err), rollbackIf(ctx, v.tx))
		}
	}
	var fresh []int
	for i, dup := range v.dup {
		res.Duplicate[i] = dup
		switch {
		case !dup:
			fresh = append(fresh, i)
		case v.mismatch[i]:
			ib.observeKey(ctx, consumer, keys[i], OutcomeMismatch, wait, nil)
		default:
			ib.observeKey(ctx, consumer, keys[i], OutcomeDuplicate, wait, nil)
		}
	}
	if len(fresh) == 0 || v.tx == nil {
		if len(fresh) > 0 {
			return res, ib.failBatch(ctx, consumer, keys, fresh, wait, OutcomeFailed, errors.New("inbox: the store claimed new keys without a transaction"))
		}
		ib.cfg.Logger.Debug("inbox: batch of duplicates skipped", withTenant(ctx, watermill.LogFields{"consumer": consumer, "messages": len(keys)}))
		return res, rollbackIf(ctx, v.tx)
	}

	tx := v.tx
	ended := false
	defer func() {
		if !ended { // fn panicked: roll back and let the panic go on
			_ = tx.Rollback(ctx)
			for _, i := range fresh {
				ib.observeKey(ctx, consumer, keys[i], OutcomeFailed, wait, errHandlerPanicked)
			}
		}
	}()
	err = fn(ContextWithTx(ctx, tx.Handle()), fresh)
	ended = true
	if err != nil {
		for _, i := range fresh {
			ib.observeKey(ctx, consumer, keys[i], OutcomeFailed, wait, err)
		}
		if rollbackErr := tx.Rollback(ctx); rollbackErr != nil {
			err = contract.Join(err, rollbackErr)
		}
		return res, err
	}
	if ctx.Err() == nil { // no commit on a dead context: pgx would close the connection
		err = tx.Commit(ctx, nil)
	} else {
		err = context.Cause(ctx)
	}
	if err != nil {
		return res, contract.Join(ib.failBatch(ctx, consumer, keys, fresh, wait, OutcomeFailed, err), tx.Rollback(ctx))
	}
	for _, i := range fresh {
		ib.observeKey(ctx, consumer, keys[i], OutcomeProcessed, wait, nil)
	}
	res.Processed = len(fresh)
	return res, nil
}

// rollbackIf rolls tx back, if there is one.
func rollbackIf(ctx context.Context, tx Tx) error {
	if tx == nil {
		return nil
	}
	return tx.Rollback(ctx)
}

// failBatch wraps err with the batch it concerns and reports it for the items of which
// (all when nil). When the context ended, that is what the error says first, as for
// one message.
func (ib *Inbox) failBatch(ctx context.Context, consumer string, keys []string, which []int, wait time.Duration, outcome Outcome, err error) error {
	what := fmt.Sprintf("consumer %q, batch of %d messages", consumer, len(keys))
	if ctxErr := ctx.Err(); ctxErr != nil {
		if !errors.Is(err, ctxErr) {
			err = contract.Join(err, ctxErr)
		}
		what += fmt.Sprintf(": the context ended (%v) before the inbox was done, so nothing was committed: call again with the same messages"+
			" (the new ones are processed then, or skipped if the commit went through); if a deadline ended it, give fn more time than it takes", ctxErr)
	}
	err = contract.Wrap(what, err)
	if which == nil {
		for i := range keys {
			ib.observeKey(ctx, consumer, keys[i], outcome, wait, err)
		}
	} else {
		for _, i := range which {
			ib.observeKey(ctx, consumer, keys[i], outcome, wait, err)
		}
	}
	return err
}

// refuseBatch reports item i of a batch as refused (outcome), and the others as failed
// with it, and returns the *BatchItemError.
func (ib *Inbox) refuseBatch(ctx context.Context, consumer string, keys []string, i int, outcome Outcome, wait time.Duration, err error) error {
	itemErr := &BatchItemError{Index: i, Err: err}
	for j := range keys {
		switch {
		case j != i:
			ib.observeKey(ctx, consumer, keys[j], OutcomeFailed, wait, itemErr)
		case outcome == OutcomeMismatch: // a duplicate, as for one message: no error of its own
			ib.observeKey(ctx, consumer, keys[j], outcome, wait, nil)
		default:
			ib.observeKey(ctx, consumer, keys[j], outcome, wait, itemErr)
		}
	}
	return itemErr
}

// observeKey reports one outcome of a message that has no Watermill message.
func (ib *Inbox) observeKey(ctx context.Context, consumer, key string, outcome Outcome, wait time.Duration, err error) {
	ib.cfg.Observer.Observe(ctx, Observation{Consumer: consumer, Key: key, Outcome: outcome, ClaimWait: wait, Err: err})
}
