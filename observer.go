package inbox

import "time"

// Outcome is what the inbox did with one message.
type Outcome string

// The outcomes an Observer sees.
const (
	OutcomeProcessed       Outcome = "processed"         // the handler ran and its transaction committed
	OutcomeDuplicate       Outcome = "duplicate"         // a duplicate, skipped (or failed, per OnDuplicate)
	OutcomeReplayed        Outcome = "replayed"          // a duplicate whose stored output was returned again
	OutcomeMismatch        Outcome = "mismatch"          // a duplicate whose fingerprint differs from the stored one
	OutcomeFailed          Outcome = "failed"            // the handler or the database failed; rolled back, nacked
	OutcomeNoKey           Outcome = "no_key"            // no key (or consumer) could be derived; nacked
	OutcomeContended       Outcome = "contended"         // the key was held too long by another transaction; nacked
	OutcomeTooManyAttempts Outcome = "too_many_attempts" // refused after MaxAttempts unfinished starts; nacked
)

// Observer receives one observation per message the inbox handles; it must be safe for
// concurrent use and quick. The inboxprom package adapts it to Prometheus collectors;
// without an Observer the inbox records nothing.
type Observer interface {
	// Observe reports a message's outcome, and how long claiming its key took, waits on
	// a concurrent duplicate included (zero when no claim was made).
	Observe(consumer string, outcome Outcome, claimWait time.Duration)
}

type nopObserver struct{}

func (nopObserver) Observe(string, Outcome, time.Duration) {}

func (ib *Inbox) observe(consumer string, outcome Outcome, claimWait time.Duration) {
	ib.cfg.Observer.Observe(consumer, outcome, claimWait)
}
