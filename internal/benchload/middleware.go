package benchload

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox"
)

// The message path as a Watermill Router runs it: the handler behind Inbox.Middleware,
// given a message whose UUID is the key. Inbox.Process (WithInbox) stores no
// fingerprint; the middleware stores, by default, the SHA-256 of the payload with every
// key (Config.Fingerprint), as a Router's consumer does. Issue 31's pairing of the
// message path against its SQL by hand went through the middleware, BenchmarkFloor's
// through Process: the two measured different library paths.

// emptyPayloadFingerprint is PayloadFingerprint of an empty payload, the fingerprint the
// middleware stores for the benchmark's messages.
var emptyPayloadFingerprint = func() []byte { s := sha256.Sum256(nil); return s[:] }()

// middlewareOp returns the handler's work behind ib.Middleware: a message with the key
// as its UUID and an empty payload.
func (t *Target) middlewareOp(ib *inbox.Inbox) Op {
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		return nil, t.work(msg.Context(), txOf(msg.Context()), msg.UUID)
	})
	return func(ctx context.Context, key string) error {
		msg := message.NewMessage(key, nil)
		msg.SetContext(ctx)
		out, err := h(msg)
		if err == nil && len(out) != 0 {
			err = fmt.Errorf("middleware: %d messages produced, want none", len(out))
		}
		return err
	}
}

// MiddlewareOps returns the handler behind the inbox's middleware: with the Config as it
// is by default (dflt), with the payload's fingerprint stored (PayloadFingerprint, fp)
// and without (NoFingerprint, nofp), whatever the default. All run on the Target's store
// and tables.
func (t *Target) MiddlewareOps() (dflt, fp, nofp Op, err error) {
	ops := make([]Op, 3)
	for i, f := range []inbox.FingerprintFunc{nil, inbox.PayloadFingerprint, inbox.NoFingerprint} {
		ib, err := inbox.New(inbox.Config{Store: t.Store, Consumer: t.consumer, Fingerprint: f})
		if err != nil {
			return nil, nil, nil, err
		}
		ops[i] = t.middlewareOp(ib)
	}
	return ops[0], ops[1], ops[2], nil
}
