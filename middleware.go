package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Metadata the middleware sets on a consumed message that turned out to be a duplicate, so
// that outer middlewares and the handler's caller can tell (MetadataOutcome says which
// kind). Stale values (a Kafka in-process resend copies the metadata of the failed
// attempt) are cleared on entry.
const (
	MetadataDuplicate = "inbox_duplicate"
	MetadataMismatch  = "inbox_fingerprint_mismatch"
)

// DuplicateMode says what the middleware does with a duplicate.
type DuplicateMode int

const (
	// Replay acks the duplicate and returns the messages the first delivery produced,
	// stored with its key, so the router publishes them again with the same UUIDs (a
	// downstream inbox deduplicates them). If the publish after the first commit failed,
	// this is how that output still goes out. A first delivery that produced nothing
	// replays nothing. It is the default.
	Replay DuplicateMode = iota
	// Skip acks the duplicate and returns nothing.
	Skip
	// Fail returns an error wrapping ErrDuplicate, so the router nacks the message: for
	// routing duplicates elsewhere, e.g. with middleware.PoisonQueueWithFilter.
	Fail
)

func (m DuplicateMode) String() string {
	switch m {
	case Replay:
		return "Replay"
	case Skip:
		return "Skip"
	case Fail:
		return "Fail"
	}
	return fmt.Sprintf("DuplicateMode(%d)", int(m))
}

// FingerprintFunc identifies a message's content, so that a duplicate whose content
// differs from the first delivery's can be told apart (see Config.OnMismatch).
type FingerprintFunc func(msg *message.Message) ([]byte, error)

// PayloadFingerprint is the SHA-256 of the payload. It is the default fingerprint.
func PayloadFingerprint(msg *message.Message) ([]byte, error) {
	sum := sha256.Sum256(msg.Payload)
	return sum[:], nil
}

// NoFingerprint stores no fingerprint and so never reports a mismatch.
func NoFingerprint(*message.Message) ([]byte, error) { return nil, nil }

// Config configures an Inbox. Pass it to New, which applies the defaults and validates it.
type Config struct {
	// Store keeps the keys: NewPostgresStore (pgx), NewSQLPostgresStore or NewMySQLStore
	// (database/sql). Required.
	Store Store

	// Consumer names the consumer that keys belong to: the same message is processed once
	// per consumer. It is part of every stored key, so it is the scope of deduplication:
	// renaming it makes every message the old name processed new again, and two
	// services that share a table under one name share their keys (one skips what the
	// other processed). Set it explicitly in production, to a name that outlives
	// refactorings and is unique per service and table; the middleware logs, once, a
	// consumer name that has no keys on a table that holds other consumers' keys (see
	// ConsumerNeighbours). Defaults to the Watermill handler name
	// (message.HandlerNameFromCtx), which every message routed by a Router carries, so
	// renaming the handler renames the consumer; set it when the middleware runs outside
	// a Router. At most 255 bytes of UTF-8.
	Consumer string

	// Key derives a message's key. Defaults to KeyFromUUID.
	Key KeyFunc

	// OnDuplicate says what to do with a duplicate. Defaults to Replay.
	OnDuplicate DuplicateMode

	// Fingerprint identifies a message's content; it is stored with the key and compared
	// on a duplicate. Defaults to PayloadFingerprint; NoFingerprint turns it off.
	Fingerprint FingerprintFunc

	// OnMismatch says what to do with a duplicate whose fingerprint differs from the
	// stored one: a producer reusing a key, or a key collision. Such a duplicate is always
	// logged as an error, counted and marked with MetadataMismatch. Defaults to Replay,
	// the same treatment as any duplicate; Fail nacks it.
	OnMismatch DuplicateMode

	// MaxAttempts, when above zero, makes the inbox count the attempts of a message
	// whose process died (OOM kill, SIGKILL, a panic that escapes the inbox), and refuse,
	// with an error wrapping ErrTooManyAttempts, a message that already has MaxAttempts
	// of them. Each delivery's attempt is a row written, and committed, before the
	// handler's transaction begins, and a session lock held until the attempt ends: it
	// ends when the delivery commits, fails cleanly (a handler error, a claim or commit
	// the database refused), is a duplicate, or is refused; a process that dies takes
	// its lock with it, and its row is what counts. Concurrent duplicates, waiting on the
	// key or failing one after the other, are never counted (ADR 60). Offset mode
	// (Position) counts no attempts: New refuses MaxAttempts with Position, and the batch
	// calls (ProcessBatch, ProcessOffsets) refuse an Inbox with MaxAttempts (ADRs 100,
	// 108). Defaults to 0, off.
	//
	// It costs one round trip more for a first delivery through pgx (the count), and a
	// few statements through database/sql. The PostgresStore needs a *pgxpool.Pool, a
	// *pgx.Conn or a *pgxpool.Conn (New says so). Where the claim's transaction is not
	// at READ COMMITTED (or is joined), the count runs on a second connection of the
	// pool; over a single connection New refuses that.
	//
	// Beside a transaction the inbox joins from the message context, the attempt's row
	// is written on a second connection of the store's pool, waited for at most
	// AttemptConnWait, and the message fails with ErrAttemptsNeedConn (nothing written)
	// when none comes, or when the store's handle is a single connection (*pgx.Conn,
	// *sql.Conn) that the joined transaction may be running on. In a joined transaction
	// an attempt ends when the handler returns nil too: the inbox cannot see the owner's
	// commit, and an owner that rolls back after the handler succeeded must not make a
	// healthy message look poisoned.
	MaxAttempts int

	// MaxOutputBytes bounds the messages a handler produces, as stored with the key for
	// Replay. A handler that produces more fails with ErrOutputTooLarge (rolled back,
	// nacked, and the same on every delivery: route it with a poison queue, or produce
	// less). Defaults to DefaultMaxOutputBytes (8 MiB), under the smallest packet limit
	// of the supported databases (MariaDB's max_allowed_packet, 16 MiB).
	MaxOutputBytes int

	// RecentKeys is how many of the keys it committed or found committed the Inbox
	// remembers, as hints only: when one comes again, the inbox first reads the key's
	// stored row, outside any transaction (one round trip), and answers the duplicate
	// from what it read; a key whose row is gone (Forget, purge) is claimed as usual, so
	// nothing is ever answered from memory. Other keys are claimed directly, as before:
	// a first delivery pays nothing for it. It applies over a PostgresStore, a
	// SQLPostgresStore or a MySQLStore (and a TenantStore's tenants on them, a key
	// remembered per tenant), not in a transaction the inbox joins nor in offset mode
	// (ADR 121). Defaults to DefaultRecentKeys; a negative number turns the hints off.
	// A delivery whose context carries ContextWithReplayHint is read first too,
	// remembered or not (ADR 125).
	RecentKeys int

	// Tenant derives each message's tenant for the middleware, which puts it in the
	// message context (ContextWithTenant): a TenantStore routes the message to that
	// tenant's store, and the handler finds it with TenantFromContext. A message without
	// one fails with ErrNoTenant, permanent, nothing written. Process and ProcessResult
	// do not use it: they take the tenant from their context. Defaults to
	// TenantFromMetadata(DefaultTenantMetadata), the metadata field "tenant", when Store
	// is a *TenantStore; otherwise to none (a tenant already in the message context, put
	// there by an outer middleware, passes through).
	Tenant TenantFunc

	// Observer receives one call per message, e.g. an inboxprom.Observer or an
	// inboxotel.Observer. Defaults to none.
	Observer Observer

	// Logger logs duplicates (debug), replays (debug) and mismatches (error) with the
	// consumer, key and message UUID, never the payload. Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter

	// Position, when set, puts the middleware in offset mode: messages are judged by
	// their position in their partition (kafkakey.Partition for watermill-kafka)
	// instead of a key, against one row per consumer, topic and partition that moves
	// forward in the handler's transaction (see docs/kafka.md). Only for subscribers
	// that deliver each partition in order, one message at a time. The store must be an
	// OffsetStore, and New checks its offsets table. It cannot be combined with Key,
	// Fingerprint or MaxAttempts (ADR 108). Defaults to nil: key mode.
	Position PositionFunc

	// TimestampSlack, in offset mode, bounds how much later than every record processed
	// so far a record below the stored offset may have been written and still be taken
	// for a redelivery: one written later is from a re-created topic or a reset log, and
	// is refused with ErrOffsetRewound. It allows for producers' clocks. Negative turns
	// the check off. Defaults to DefaultTimestampSlack, 10s.
	TimestampSlack time.Duration

	// MaxOffsetRewind, in offset mode, bounds how far below the stored offset a record
	// may be and still be taken for a redelivery; one further below is refused with
	// ErrOffsetRewound. Set it above the most records a partition can be read again
	// after a crash (Kafka's commit interval times the partition's peak rate), when the
	// consumer resumes from Kafka's committed offsets. Defaults to 0: no bound.
	MaxOffsetRewind int64
}

// DefaultRecentKeys is Config.RecentKeys's default.
const DefaultRecentKeys = 4096

// DefaultMaxOutputBytes is Config.MaxOutputBytes's default.
const DefaultMaxOutputBytes = 8 << 20

// maxConsumerLen bounds consumer names so every store can index them.
const maxConsumerLen = 255

func (c *Config) setDefaults() {
	if c.Key == nil && c.Position == nil {
		c.Key = KeyFromUUID
	}
	if c.Fingerprint == nil && c.Position == nil {
		c.Fingerprint = PayloadFingerprint
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.RecentKeys == 0 {
		c.RecentKeys = DefaultRecentKeys
	}
	if _, routes := c.Store.(*TenantStore); routes && c.Tenant == nil {
		c.Tenant = TenantFromMetadata(DefaultTenantMetadata)
	}
	if c.TimestampSlack == 0 {
		c.TimestampSlack = DefaultTimestampSlack
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("Store is nil: set it to inbox.NewPostgresStore(pool, inbox.PostgresConfig{}) or another store"))
	}
	if c.Consumer != "" {
		if err := ValidateConsumer(c.Consumer); err != nil {
			errs = append(errs, fmt.Errorf("Consumer: %w", err))
		}
	}
	for _, m := range []struct {
		name string
		mode DuplicateMode
	}{{"OnDuplicate", c.OnDuplicate}, {"OnMismatch", c.OnMismatch}} {
		if m.mode < Replay || m.mode > Fail {
			errs = append(errs, fmt.Errorf("%s is %v: use inbox.Replay, inbox.Skip or inbox.Fail", m.name, m.mode))
		}
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("MaxAttempts is %d: use 0 to turn attempt counting off, or a positive limit", c.MaxAttempts))
	}
	if c.MaxOutputBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxOutputBytes is %d: use a positive number of bytes, or 0 for the default %d", c.MaxOutputBytes, DefaultMaxOutputBytes))
	}
	errs = append(errs, c.validateOffsets()...)
	return contract.Join(errs...)
}

// ValidateConsumer reports whether consumer can name a consumer: 1 to 255 bytes of
// valid UTF-8 without NUL bytes. New, Process and ProcessResult refuse any other, and so
// does inboxhttp.New, with this function. The error wraps ErrNoConsumer for an empty
// name.
func ValidateConsumer(consumer string) error {
	switch {
	case consumer == "":
		return ErrNoConsumer
	case len(consumer) > maxConsumerLen:
		return fmt.Errorf("consumer name is %d bytes long, more than %d: choose a shorter name", len(consumer), maxConsumerLen)
	case !utf8.ValidString(consumer) || strings.IndexByte(consumer, 0) >= 0:
		return fmt.Errorf("consumer name %q is not valid UTF-8 text without NUL bytes", consumer)
	}
	return nil
}

// Inbox makes a consumer's effects happen once per message: see the package doc.
type Inbox struct {
	cfg       Config
	consumers sync.Map // consumer names checkConsumer has seen
	// inFlight holds, in offset mode, the partitions a message is in the middleware of.
	inFlight partitionsInFlight
	// recent holds the keys to read before claiming (Config.RecentKeys); nil when off.
	recent *recentKeys
	// reader reads a key's stored row before its claim (readFirst); nil when the store
	// cannot.
	reader contract.StoredReader
}

// verifyTimeout bounds New's check that the store's tables exist.
const verifyTimeout = 30 * time.Second

// New returns an Inbox. It fails when the config is invalid, naming the field and what to
// do, and when the store's tables are missing, saying how to create them.
func New(cfg Config) (*Inbox, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("inbox: invalid config: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), verifyTimeout)
	defer cancel()
	if err := cfg.Store.Verify(ctx); err != nil {
		return nil, err
	}
	if c, ok := cfg.Store.(contract.AttemptChecker); ok && cfg.MaxAttempts > 0 {
		if err := c.CheckAttempts(ctx); err != nil {
			if errors.Is(err, contract.ErrProbeFailed) { // not the config: the connection failed
				return nil, err
			}
			return nil, fmt.Errorf("inbox: invalid config: MaxAttempts is %d: %w", cfg.MaxAttempts, err)
		}
	}
	if err := cfg.verifyOffsets(ctx); err != nil {
		return nil, err
	}
	reader, _ := cfg.Store.(contract.StoredReader)
	return &Inbox{cfg: cfg, recent: newRecentKeys(cfg), reader: reader}, nil
}

// Middleware is the Watermill middleware: router.AddMiddleware(ib.Middleware). For each
// message it claims the message's key in a new transaction (or the one in the message
// context), runs the handler with the transaction in the message context, and commits
// before returning, so before the router acks. A handler error or panic rolls the key
// back with the handler's writes, and the error makes the router nack. A duplicate does
// not reach the handler; Config.OnDuplicate says what happens to it.
//
// Put it inside Retry and PoisonQueue, so each retry gets a fresh transaction, and outside
// Timeout, so that the deadline bounds the handler and not the claim or the commit (see
// the README's middleware ordering). The deadline is the handler's to honour: a handler
// that returns nil after it is committed, since the inbox commits exactly when the handler
// returns nil.
func (ib *Inbox) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		delete(msg.Metadata, MetadataDuplicate)
		delete(msg.Metadata, MetadataMismatch)
		delete(msg.Metadata, MetadataOutcome)
		delete(msg.Metadata, MetadataClaimWait)

		rec, outcome, err := ib.record(msg)
		if err != nil {
			err = contract.Wrap(messageName(msg), err)
			ib.observe(msg.Context(), rec, msg, outcome, 0, err)
			return nil, err
		}
		msgCtx := msg.Context()
		ctx, err := ib.tenant(msg, rec)
		if err != nil {
			return nil, err
		}
		if rec.Position != nil { // offset mode: one message of a tenant's partition at a time
			leave, err := ib.enterPartition(ctx, msg, rec)
			if err != nil {
				return nil, err
			}
			defer leave()
		}
		ib.checkConsumer(ctx, rec.Consumer)
		var produced []*message.Message
		claim, wait, err := ib.process(ctx, rec, msg, func(txCtx context.Context) ([]byte, error) {
			msg.SetContext(txCtx)
			defer msg.SetContext(msgCtx)
			var err error
			if produced, err = h(msg); err != nil {
				return nil, err
			}
			return encodeOutput(produced)
		})
		switch {
		case err != nil:
			return nil, err
		case claim.Duplicate:
			return ib.duplicate(ctx, msg, rec, claim, wait)
		}
		return produced, nil
	}
}

// tenant returns msg's context with the tenant Config.Tenant derives, or the message
// context as it is when there is no Config.Tenant. A message without a tenant is refused.
func (ib *Inbox) tenant(msg *message.Message, rec Record) (context.Context, error) {
	ctx := msg.Context()
	if ib.cfg.Tenant == nil {
		return ctx, nil
	}
	tenant, err := ib.cfg.Tenant(msg)
	if err == nil && tenant == "" {
		err = fmt.Errorf("%w: Config.Tenant returned an empty tenant", ErrNoTenant)
	}
	if err != nil {
		// ErrNoTenant is permanent; another error of the user's function keeps its own
		// meaning (a lookup that failed may succeed on the next delivery).
		outcome := OutcomeNoTenant
		if !tenantError(err) {
			outcome, err = OutcomeFailed, fmt.Errorf("deriving the tenant (Config.Tenant): %w", err)
		}
		err = contract.Wrap(fmt.Sprintf("message %s: consumer %q key %q", msg.UUID, rec.Consumer, rec.Key), err)
		ib.observe(ctx, rec, msg, outcome, 0, err)
		return ctx, err
	}
	return ContextWithTenant(ctx, tenant), nil
}

// Process runs fn once per (consumer, key), for consumers outside Watermill: custom
// consumer loops, HTTP webhooks. fn runs in the claimed transaction, which ctx carries
// (TxFromContext); it commits when fn returns nil and rolls back, key included, when fn
// returns an error or panics. A duplicate returns (true, nil) without calling fn, whatever
// Config.OnDuplicate says. An error from fn is returned unchanged.
func (ib *Inbox) Process(ctx context.Context, consumer, key string, fn func(ctx context.Context) error) (duplicate bool, err error) {
	if err := ValidateConsumer(consumer); err != nil {
		return false, fmt.Errorf("inbox: %w", err)
	}
	if key == "" {
		return false, fmt.Errorf("inbox: consumer %q: %w: the key is empty", consumer, ErrNoKey)
	}
	rec := Record{Consumer: consumer, Key: contract.StorableKey(key)}
	claim, wait, err := ib.process(ctx, rec, nil, func(ctx context.Context) ([]byte, error) {
		return nil, fn(ctx)
	})
	if claim.Duplicate {
		ib.cfg.Logger.Debug("inbox: duplicate skipped", withTenant(ctx, watermill.LogFields{"consumer": consumer, "key": rec.Key}))
		ib.observe(ctx, rec, nil, OutcomeDuplicate, wait, nil)
	}
	return claim.Duplicate, err
}

// record derives the consumer, key and fingerprint of msg; when one cannot be, it
// returns why, and the outcome: OutcomeNoKey for the consumer or the key, OutcomeFailed
// for the fingerprint (the message has a key, the fingerprint function failed).
func (ib *Inbox) record(msg *message.Message) (Record, Outcome, error) {
	rec := Record{Consumer: ib.cfg.Consumer}
	if rec.Consumer == "" {
		rec.Consumer = message.HandlerNameFromCtx(msg.Context())
		if err := ValidateConsumer(rec.Consumer); err != nil {
			return rec, OutcomeNoKey, fmt.Errorf("%w (set inbox.Config.Consumer when the middleware runs outside a Router)", err)
		}
	}
	if ib.cfg.Position != nil {
		return ib.positionRecord(msg, rec)
	}
	key, err := ib.cfg.Key(msg)
	if err == nil && key == "" {
		err = fmt.Errorf("%w: the key function returned an empty key", ErrNoKey)
	}
	if err != nil {
		return rec, OutcomeNoKey, err
	}
	rec.Key = contract.StorableKey(key)
	if rec.Fingerprint, err = ib.cfg.Fingerprint(msg); err != nil {
		return rec, OutcomeFailed, fmt.Errorf("consumer %q key %q: the fingerprint function failed: %w", rec.Consumer, rec.Key, err)
	}
	return rec, "", nil
}

// messageName names msg in errors: by its UUID, or as one without a UUID (a message from
// a producer that is not Watermill's), never as "message :".
func messageName(msg *message.Message) string {
	if msg.UUID == "" {
		return "message without a UUID"
	}
	return "message " + msg.UUID
}

// duplicate marks msg as a duplicate and acts per the configured mode.
func (ib *Inbox) duplicate(ctx context.Context, msg *message.Message, rec Record, claim Claim, wait time.Duration) ([]*message.Message, error) {
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	msg.Metadata.Set(MetadataDuplicate, "true")
	fields := withTenant(ctx, watermill.LogFields{"consumer": rec.Consumer, "key": rec.Key, "message_uuid": msg.UUID})

	mode, outcome := ib.cfg.OnDuplicate, OutcomeDuplicate
	cause := ErrDuplicate
	if rec.Fingerprint != nil && claim.Fingerprint != nil && !bytes.Equal(rec.Fingerprint, claim.Fingerprint) {
		msg.Metadata.Set(MetadataMismatch, "true")
		mode, outcome = ib.cfg.OnMismatch, OutcomeMismatch
		cause = contract.Join(ErrDuplicate, ErrFingerprintMismatch)
		ib.cfg.Logger.Error("inbox: duplicate key with a different fingerprint", ErrFingerprintMismatch, fields)
	}

	switch mode {
	case Fail:
		ib.observe(ctx, rec, msg, outcome, wait, nil)
		ib.cfg.Logger.Debug("inbox: duplicate refused", fields)
		return nil, fmt.Errorf("inbox: %s: consumer %q key %q: %w", messageName(msg), rec.Consumer, rec.Key, cause)
	case Skip:
		ib.observe(ctx, rec, msg, outcome, wait, nil)
		ib.cfg.Logger.Debug("inbox: duplicate skipped", fields)
		return nil, nil
	}
	replay, err := decodeOutput(claim.Output)
	if err != nil {
		err = contract.Wrap(messageName(msg), err)
		ib.observe(ctx, rec, msg, OutcomeFailed, wait, err)
		return nil, err
	}
	if len(replay) > 0 && outcome == OutcomeDuplicate {
		outcome = OutcomeReplayed
	}
	ib.observe(ctx, rec, msg, outcome, wait, nil)
	ib.cfg.Logger.Debug("inbox: duplicate skipped", fields.Add(watermill.LogFields{"replayed": len(replay)}))
	return replay, nil
}
