package inbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Result is what ProcessResult did with one key.
type Result struct {
	// Duplicate reports that the key had been committed before: fn did not run, and
	// Output is what the first call stored.
	Duplicate bool
	// Mismatch reports a duplicate whose stored fingerprint differs from the one given:
	// the same key for different content. Config.OnMismatch says whether Output is then
	// returned (Replay), left empty (Skip), or the call fails instead (Fail).
	Mismatch bool
	// Output is the bytes fn returned, on the first call as on a duplicate, byte for
	// byte. An empty output comes back as nil.
	Output []byte
}

// ProcessResult is Process for callers that must give a retry the first answer: HTTP
// handlers, webhook receivers, RPC servers. fn runs once per (consumer, key) in the
// claimed transaction, which ctx carries (TxFromContext); the bytes it returns are stored
// with the key in that transaction, which then commits. A later call with the same key
// does not run fn and returns those bytes again, in Result.Output.
//
// fingerprint identifies the content the key stands for (e.g. a hash of the request); it
// is stored with the key, and a duplicate whose fingerprint differs from the stored one
// is a mismatch, treated per Config.OnMismatch: Replay (the default) returns the stored
// output with Result.Mismatch set, Skip returns no output, and Fail returns an error
// wrapping ErrDuplicate and ErrFingerprintMismatch. A nil fingerprint is never compared.
// Config.OnDuplicate does not apply: a duplicate always returns the stored output.
//
// fn's error, or a panic, rolls everything back, key included, and is returned
// unchanged; the next call with that key runs fn again. A commit that fails returns an
// error and stores nothing.
func (ib *Inbox) ProcessResult(ctx context.Context, consumer, key string, fingerprint []byte, fn func(ctx context.Context) ([]byte, error)) (Result, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return Result{}, fmt.Errorf("inbox: %w", err)
	}
	if key == "" {
		return Result{}, fmt.Errorf("inbox: consumer %q: %w: the key is empty", consumer, ErrNoKey)
	}
	rec := Record{Consumer: consumer, Key: contract.StorableKey(key), Fingerprint: fingerprint}
	var output []byte
	claim, wait, err := ib.process(ctx, rec, nil, func(ctx context.Context) ([]byte, error) {
		var err error
		output, err = fn(ctx)
		return output, err
	})
	switch {
	case err != nil:
		return Result{}, err
	case !claim.Duplicate:
		if len(output) == 0 {
			output = nil
		}
		return Result{Output: output}, nil
	}

	fields := withTenant(ctx, watermill.LogFields{"consumer": consumer, "key": rec.Key})
	res := Result{Duplicate: true, Output: claim.Output}
	if len(res.Output) == 0 {
		res.Output = nil
	}
	if fingerprint == nil || claim.Fingerprint == nil || bytes.Equal(fingerprint, claim.Fingerprint) {
		outcome := OutcomeReplayed // something came back
		if res.Output == nil {
			outcome = OutcomeDuplicate
		}
		ib.cfg.Logger.Debug("inbox: duplicate, stored result returned", fields)
		ib.observe(ctx, rec, nil, outcome, wait, nil)
		return res, nil
	}
	res.Mismatch = true
	ib.cfg.Logger.Error("inbox: duplicate key with a different fingerprint", ErrFingerprintMismatch, fields)
	ib.observe(ctx, rec, nil, OutcomeMismatch, wait, nil)
	switch ib.cfg.OnMismatch {
	case Fail:
		return Result{}, fmt.Errorf("inbox: consumer %q key %q: %w", consumer, rec.Key, contract.Join(ErrDuplicate, ErrFingerprintMismatch))
	case Skip:
		res.Output = nil
	}
	return res, nil
}

// ProcessJSON is ProcessResult for a value: fn's result is stored as JSON and decoded
// again on a duplicate, so a retry gets a value equal to the first one. duplicate reports
// that fn did not run. On a mismatch that Config.OnMismatch skips, v is T's zero value.
func ProcessJSON[T any](ctx context.Context, ib *Inbox, consumer, key string, fingerprint []byte, fn func(ctx context.Context) (T, error)) (v T, duplicate bool, err error) {
	res, err := ib.ProcessResult(ctx, consumer, key, fingerprint, func(ctx context.Context) ([]byte, error) {
		var err error
		if v, err = fn(ctx); err != nil {
			return nil, err
		}
		out, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("inbox: encoding the result as JSON: %w", err)
		}
		return out, nil
	})
	if err != nil || !res.Duplicate {
		return v, false, err
	}
	var stored T
	if res.Output != nil {
		if err := json.Unmarshal(res.Output, &stored); err != nil {
			return stored, true, fmt.Errorf("inbox: consumer %q key %q: decoding the stored result as %T: %w", consumer, key, stored, err)
		}
	}
	return stored, true, nil
}
