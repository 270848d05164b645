package inbox

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Outcome is what the inbox did with one message.
type Outcome string

// The outcomes an Observer sees. Each has one meaning, whatever the entry point
// (Middleware, Process, ProcessResult, inboxhttp):
//
//   - A duplicate is exactly one of three: OutcomeMismatch when its fingerprint differs
//     from the stored one, whatever the mode does with it; otherwise OutcomeReplayed when
//     stored output was given back (the produced messages Replay returns, a stored
//     result ProcessResult returns, a stored response inboxhttp sends), and
//     OutcomeDuplicate when nothing was (none stored, or Skip, or Fail).
//   - A failure is exactly one of four: OutcomeNoKey when no key or consumer could be
//     derived (no claim was tried), OutcomeTooManyAttempts when MaxAttempts refused it,
//     OutcomeContended when the key was held too long by another delivery (the
//     database gave up waiting, or the caller did: an error or a context cause wrapping
//     ErrContended), and OutcomeFailed for everything else: the handler, a panic, the
//     fingerprint function, the database.
const (
	OutcomeProcessed       Outcome = "processed"         // the handler ran and its transaction committed
	OutcomeDuplicate       Outcome = "duplicate"         // a duplicate; nothing stored given back (skipped, failed per OnDuplicate, or nothing to replay)
	OutcomeReplayed        Outcome = "replayed"          // a duplicate whose stored output was given back
	OutcomeMismatch        Outcome = "mismatch"          // a duplicate whose fingerprint differs from the stored one
	OutcomeFailed          Outcome = "failed"            // the handler, the fingerprint or the database failed; rolled back, nacked
	OutcomeNoKey           Outcome = "no_key"            // no key (or consumer) could be derived; nacked
	OutcomeContended       Outcome = "contended"         // the key was held too long by another delivery; nacked
	OutcomeTooManyAttempts Outcome = "too_many_attempts" // refused after MaxAttempts attempts that crashed; nacked
	OutcomeNoTenant        Outcome = "no_tenant"         // the tenant is missing or unknown; nothing written, nacked
)

// Metadata the middleware sets on every message it handles, with what the Observer sees,
// so that outer middlewares, loggers and the poison queue can tell a replayed duplicate
// from a skipped one, or a slow claim, without an Observer. Like MetadataDuplicate and
// MetadataMismatch, stale values (a Kafka in-process resend copies the metadata of the
// failed attempt; Watermill's Retry runs the same message again) are cleared on entry.
const (
	// MetadataOutcome holds the Outcome: processed, duplicate, replayed, mismatch, or one
	// of the failures.
	MetadataOutcome = "inbox_outcome"
	// MetadataClaimWait holds Observation.ClaimWait as a Go duration (time.ParseDuration
	// reads it, e.g. "1.52ms"); it is absent when no claim was tried.
	MetadataClaimWait = "inbox_claim_wait"
)

// Observation is what the inbox reports about one message it handled.
type Observation struct {
	// Consumer is the consumer the key belongs to. It is empty when no consumer could be
	// derived (OutcomeNoKey).
	Consumer string
	// Key is the key as stored: the key function's result, or its SHA-256 (hex) when that
	// is too long or not text. It is empty when no key could be derived. Keys can carry
	// personal data: do not export it by default.
	Key string
	// Tenant is the tenant of the message (TenantFromContext of its context, as the
	// middleware set it from Config.Tenant, or as the caller of Process gave it); empty
	// without one.
	Tenant string
	// MessageUUID is the Watermill message's UUID; empty for Inbox.Process, which has no
	// message.
	MessageUUID string
	// Outcome is what the inbox did with the message.
	Outcome Outcome
	// ClaimWait is how long claiming the key took, waits on a concurrent duplicate's
	// transaction included (and, with MaxAttempts, the attempt's start and count, which
	// travel with the claim), whatever the outcome: a claim that failed or was refused
	// reports its real time too. It is zero only when no claim was tried (no key, a
	// fingerprint function that failed, a context that had ended).
	ClaimWait time.Duration
	// Err is why the message failed: non-nil exactly for OutcomeFailed, OutcomeNoKey,
	// OutcomeContended, OutcomeTooManyAttempts and OutcomeNoTenant, nil for a processed
	// message and for every kind of duplicate (even one that OnDuplicate: Fail nacks).
	// It is the handler's error unchanged (or one saying that it panicked), or the
	// inbox's, which names the consumer and key. Permanent(Err) says whether a retry can
	// help.
	Err error
}

// errHandlerPanicked is Observation.Err for a handler that panicked; the panic itself
// goes on up the stack.
var errHandlerPanicked = errors.New("the handler panicked; the transaction was rolled back")

// Observer receives one Observation per message the inbox handles, from the goroutine
// that handles it; it must be safe for concurrent use and quick. ctx is the message's
// context as the middleware got it, with the tenant Config.Tenant derived (for
// Inbox.Process, the ctx passed to it), not the handler's: it holds no transaction of
// the inbox's own (only a joined one it came in with), so an observer can annotate the
// span it carries or attach a metric to its trace, but must not write through it. The
// inboxprom and inboxotel packages adapt it to Prometheus and OpenTelemetry; without an
// Observer the inbox records nothing.
type Observer interface {
	// Observe reports what the inbox did with one message.
	Observe(ctx context.Context, o Observation)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, o Observation)

// Observe calls f(ctx, o).
func (f ObserverFunc) Observe(ctx context.Context, o Observation) { f(ctx, o) }

type nopObserver struct{}

func (nopObserver) Observe(context.Context, Observation) {}

// observe reports one outcome for rec, and marks msg (nil for Process) with it.
func (ib *Inbox) observe(ctx context.Context, rec Record, msg *message.Message, outcome Outcome, claimWait time.Duration, err error) {
	o := Observation{Consumer: rec.Consumer, Key: rec.Key, Outcome: outcome, ClaimWait: claimWait, Err: err}
	o.Tenant, _ = TenantFromContext(ctx)
	if msg != nil {
		o.MessageUUID = msg.UUID
		if msg.Metadata == nil {
			msg.Metadata = message.Metadata{}
		}
		msg.Metadata.Set(MetadataOutcome, string(outcome))
		if claimWait > 0 {
			msg.Metadata.Set(MetadataClaimWait, claimWait.String())
		}
	}
	ib.cfg.Observer.Observe(ctx, o)
}
