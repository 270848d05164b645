package inbox

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// permanentErrors are this package's permanent errors (docs/errors.md): the message
// cannot succeed as it is, however often it comes again.
var permanentErrors = []error{
	ErrNoKey, ErrNoConsumer, ErrDuplicate, ErrFingerprintMismatch, ErrTooManyAttempts,
	ErrTxDone, ErrRetention, ErrNoTx, ErrOutputTooLarge, ErrNoTenant, ErrUnknownTenant,
	ErrOffsetRewound, ErrNotInOrder, ErrMixedTenants, ErrPurgeTurnBehindPooler,
}

// PermanentError is what an error implements to tell Permanent what it is: a store's
// own error (redisstore's refused commands implement it), or a handler's, such as a
// validation error that no redelivery can cure. Permanent looks for it along the
// error's whole chain (errors.As).
type PermanentError interface {
	error
	// Permanent reports whether the error is permanent.
	Permanent() bool
}

// Permanent reports whether err says that the message cannot succeed as it is, however
// often it comes again: no key, a fingerprint mismatch, output too large to store,
// too many attempts that crashed, a missing or unknown tenant, a duplicate refused by OnDuplicate: Fail, a handler
// that ended the inbox transaction itself, a command Redis refused before running it,
// or an error of the handler's that implements PermanentError. Such a message belongs in
// a poison queue, and retrying it only runs it again:
//
//	poison, _ := middleware.PoisonQueueWithFilter(pub, "poison", inbox.Permanent)
//	retry := middleware.Retry{MaxRetries: 3, ShouldRetry: inbox.ShouldRetry}
//
// Every other error is transient, nil excepted: a contended key, a connection that
// broke, a message context that ended, a database that is not ready (a missing table):
// nack the message and it comes again. A chain that holds a permanent error is
// permanent, whatever else it holds (a rollback that failed after the output was too
// large is still a message whose output is too large). docs/errors.md is the table.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	var p PermanentError
	if errors.As(err, &p) && p.Permanent() {
		return true
	}
	for _, perm := range permanentErrors {
		if errors.Is(err, perm) {
			return true
		}
	}
	return false
}

// MarkPermanent returns err marked as permanent: an error with err's text, that wraps
// err (errors.Is and errors.As see through it) and that Permanent reports as permanent.
// A handler returns it for what no redelivery can cure, e.g.
// inbox.MarkPermanent(fmt.Errorf("order %s: unknown currency %q", id, cur)); packages
// declare their permanent sentinels with it. It returns nil for nil.
func MarkPermanent(err error) error { return contract.MarkPermanent(err) }

// ShouldRetry is Watermill's middleware.Retry.ShouldRetry for a handler behind the
// inbox: it retries transient errors only (see Permanent).
func ShouldRetry(params middleware.RetryParams) bool {
	return !Permanent(params.Err)
}
