// Package inboxotel reports an inbox's outcomes through OpenTelemetry: metrics through the
// OTel metrics API, and attributes and an event on the span the message's context
// carries. It imports the OTel API only (go.opentelemetry.io/otel, .../metric,
// .../trace); the inbox package itself never imports OpenTelemetry, so users without it
// pay nothing.
//
//	obs, err := inboxotel.New(inboxotel.Config{}) // the global MeterProvider
//	...
//	ib, err := inbox.New(inbox.Config{Store: store, Observer: obs})
//
// # Metrics
//
// Under the instrumentation scope ScopeName:
//
//   - inbox.messages (counter, {message}): deliveries handled, per inbox.consumer and
//     inbox.outcome (processed, duplicate, replayed, mismatch, failed, no_key, contended,
//     too_many_attempts): a message delivered, retried or redelivered counts once per
//     pass, so this counts deliveries, not distinct messages.
//   - inbox.claim.duration (histogram, s): how long claiming the key took, waits on a
//     concurrent duplicate's transaction included, per inbox.consumer and inbox.outcome;
//     every outcome that tried a claim adds a sample (ClaimDurationBuckets).
//
// The message's context is passed to the instruments, so an SDK that keeps exemplars
// (the default: trace-based) links a sample to the message's trace.
//
// TableGauges (NewTableGauges) reports what the table holds: inbox.table.keys and
// inbox.table.oldest_key.age per inbox.consumer, from a sample of the store's Stats
// taken at most once per TableConfig.Interval, in the background.
//
// # Spans
//
// The Observer starts no span: it annotates trace.SpanFromContext(ctx), the span of
// whatever tracing middleware runs outside the inbox (put it inside Retry for one span per
// attempt). It sets inbox.consumer, inbox.outcome and inbox.claim.wait (seconds), and adds
// one EventName event per pass with the outcome and the wait, so retries within one span
// each show. A failure (failed, no_key, contended, too_many_attempts) sets codes.Error and
// error.type to the outcome; a duplicate, replayed or mismatched message is not an error,
// even when OnDuplicate: Fail nacks it.
//
// Tracing (NewTracing) is such a middleware: it starts a consumer span, "process
// <topic>", continuing the trace the message carries in its metadata (W3C traceparent,
// as package outbox writes it for the messages a handler emits), so that one trace
// follows a message through the outbox to the next consumer.
//
// Keys can carry personal data (an e-mail address, an account number), and the inbox's
// errors name the key, so by default neither the key, nor the message UUID (the key under
// the default inbox.KeyFromUUID), nor the error text reaches the span: Config.RecordKey,
// RecordMessageID and RecordErrors opt in. Metrics never carry the key or the UUID.
package inboxotel
