package inboxkgo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
)

// Action is what Config.OnError decides for a batch that failed.
type Action int

const (
	// Retry polls the batch again after a backoff (Config.MinBackoff, doubling up to
	// Config.MaxBackoff, with jitter), rebalances allowed in between.
	Retry Action = iota + 1
	// Skip hands the record the failure names (Failure.Record), or every record of the
	// batch when it names none, to Config.Skip, and processes the others of the batch:
	// the offsets move past a skipped record once the destination has taken it. Without
	// a destination it is Stop.
	Skip
	// Stop moves the batch's partitions back to its first records and makes Run return
	// the error: a call of Run again polls them again.
	Stop
)

func (a Action) String() string {
	switch a {
	case Retry:
		return "retry"
	case Skip:
		return "skip"
	case Stop:
		return "stop"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Failure is a batch that failed, as Config.OnError sees it.
type Failure struct {
	// Records is the batch, as polled.
	Records []*kgo.Record
	// Record is the record the error names: one the inbox refused before anything was
	// processed (an *inbox.BatchItemError: no key, inbox.ErrOffsetRewound...), or one
	// the handler named (a *RecordError). Nil when the batch failed as a whole (the
	// handler, the database).
	Record *kgo.Record
	// Err is why the batch failed: the inbox's error, or the handler's.
	Err error
	// Attempt counts the failures of this batch in a row: 1 the first time.
	Attempt int

	handler bool // Record was named by the handler, not refused by the inbox
}

// RecordError is what Config.Handle returns to name the record a batch failed on (a
// payload it cannot parse, a record it refuses), so that Config.OnError can skip that
// record and process the others. Whether retrying can help is Err's (inbox.Permanent).
type RecordError struct {
	// Record is the record, one of those Handle got.
	Record *kgo.Record
	// Err says what is wrong with it.
	Err error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record %s/%d/%d: %v", e.Record.Topic, e.Record.Partition, e.Record.Offset, e.Err)
}

// Unwrap returns Err.
func (e *RecordError) Unwrap() error { return e.Err }

// DefaultOnError is Config.OnError's default:
//   - a record refused with inbox.ErrOffsetRewound: Stop. Its partition's next records
//     are most likely refused too (a topic deleted and created again, a log truncated):
//     an operator says where to resume (`inbox offsets reset`, Inbox.SetOffset);
//   - another record the error names, when the error is permanent (inbox.Permanent: no
//     key, a fingerprint mismatch under OnMismatch Fail, a handler's permanent
//     RecordError): Skip, to Config.Skip (without one, Stop);
//   - a permanent error of the whole batch: Stop;
//   - anything else, transient (the database unreachable, a contended key, a handler's
//     error not marked permanent): Retry, without limit, the backoff bounded by
//     Config.MaxBackoff.
func DefaultOnError(_ context.Context, f Failure) Action {
	switch {
	case errors.Is(f.Err, inbox.ErrOffsetRewound):
		return Stop
	case f.Record != nil && inbox.Permanent(f.Err):
		return Skip
	case inbox.Permanent(f.Err):
		return Stop
	}
	return Retry
}

// retry moves the batch's partitions back to its first records, allows rebalances and
// waits the backoff of attempt; false when ctx ended meanwhile.
func (c *Consumer) retry(ctx context.Context, cl *kgo.Client, records []*kgo.Record, attempt int) bool {
	rewind(cl, records)
	cl.AllowRebalance()
	return sleep(ctx, c.backoff(attempt)) == nil
}

// failure describes a failed batch: the record the error names, and its failures in a
// row (a batch polled again after a retry starts where it did).
func (c *Consumer) failure(records []*kgo.Record, err error) Failure {
	id := batchID(records)
	if c.failed.id != id {
		c.failed.id, c.failed.attempts = id, 0
	}
	c.failed.attempts++
	f := Failure{Records: records, Err: err, Attempt: c.failed.attempts}
	var named *namedError
	if errors.As(err, &named) {
		f.Record, f.Err, f.handler = named.record, named.err, named.handler
	}
	return f
}

// skip hands the record f names, or every record of the batch, to the destination, and
// sets aside those it took.
func (c *Consumer) skip(ctx context.Context, records []*kgo.Record, f Failure) error {
	targets := records
	if f.Record != nil {
		targets = []*kgo.Record{f.Record}
	}
	refused := f.Record != nil && !f.handler
	for _, r := range targets {
		p := positionOf(r)
		if s, ok := c.skips[p]; ok { // taken already: the inbox refused it since
			c.skips[p] = skip{claim: s.claim && !refused}
			continue
		}
		if err := c.cfg.Skip.Accept(ctx, r, f.Err); err != nil {
			return err
		}
		c.skips[p] = skip{claim: !refused}
	}
	return nil
}

// forgetSkips drops the skips of a committed batch's records.
func (c *Consumer) forgetSkips(records []*kgo.Record) {
	if len(c.skips) == 0 {
		return
	}
	for _, r := range records {
		delete(c.skips, positionOf(r))
	}
}

// namedError is a batch's error that names one of its records: refused by the inbox,
// or named by the handler (a *RecordError).
type namedError struct {
	record  *kgo.Record
	err     error
	handler bool
}

func (e *namedError) Error() string { return e.err.Error() }
func (e *namedError) Unwrap() error { return e.err }

// backoff returns the wait before the attempt+1-th try: MinBackoff doubled per failure,
// at most MaxBackoff, and a random share of up to a quarter more.
func (c *Consumer) backoff(attempt int) time.Duration {
	d := c.cfg.MinBackoff
	for i := 1; i < attempt && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.cfg.MaxBackoff)
	return d + rand.N(d/4+1)
}

// position is a record's place, which identifies it across polls.
type position struct {
	topic     string
	partition int32
	offset    int64
}

func positionOf(r *kgo.Record) position { return position{r.Topic, r.Partition, r.Offset} }

// batchID identifies a polled batch across polls by the first record of each of its
// partitions: a batch polled again after a Retry starts where the failed one did.
func batchID(records []*kgo.Record) string {
	first := map[[2]any]int64{}
	for _, r := range records {
		k := [2]any{r.Topic, r.Partition}
		if o, ok := first[k]; !ok || r.Offset < o {
			first[k] = r.Offset
		}
	}
	parts := make([]string, 0, len(first))
	for k, o := range first {
		parts = append(parts, fmt.Sprintf("%s/%d/%d", k[0], k[1], o))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// skip is a record Config.Skip has taken.
type skip struct {
	// claim: the inbox can still claim the record (the handler named it), so it is
	// claimed with the batch and kept from the handler: its key or offset is stored, and
	// a redelivery is a duplicate. Otherwise (the inbox refused it) it is left out of
	// the batch.
	claim bool
}

// sleep waits d, or less if ctx ends, and then returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
