package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Defaults of Config.
const (
	DefaultPrefix    = "inbox:"
	DefaultLease     = 30 * time.Second
	DefaultRetention = contract.DefaultMinRetention
	// DefaultReplicaTimeout bounds the WAIT for Config.Replicas.
	DefaultReplicaTimeout = time.Second
)

// Config configures a Store. Pass it to New, which applies the defaults and validates it.
type Config struct {
	// Prefix starts the name of every Redis key the store writes, so that several
	// inboxes (or tests) share one Redis. It must not contain '{' or '}'. Defaults to
	// DefaultPrefix, "inbox:".
	Prefix string

	// Lease is how long a claim holds its key while the handler runs: choose it longer
	// than the slowest handler. A handler that outlives it loses the claim: another
	// delivery may take the key, and then the late commit is refused with ErrLeaseLost,
	// nothing applied, so the message is nacked (if none did, it commits). A process that dies holds the key until
	// the lease expires; the redelivery then processes it. Leases follow Redis's wall
	// clock. Defaults to DefaultLease, 30s.
	Lease time.Duration

	// Wait bounds how long a concurrent duplicate waits for the delivery holding the
	// lease to commit (it is then a duplicate) or release it (it then processes). Past
	// it, Claim returns an error wrapping inbox.ErrContended and the message is nacked.
	// Waiters block on a per-key list (BLPOP), each holding a connection of the
	// client's pool, and never poll. Defaults to Lease.
	Wait time.Duration

	// Retention is how long a committed key is kept: Redis expires it by itself, so
	// Store.PurgeBatch does nothing. A message redelivered after its key expired is
	// processed again: keep it longer than the broker can redeliver. Defaults to
	// DefaultRetention, 7 days (contract.DefaultMinRetention).
	Retention time.Duration

	// HashTag returns the Redis Cluster hash tag (without braces) of every key of one
	// (consumer, key). On a Cluster, the handler's own keys must carry the same tag
	// (Tx.Tag): return, e.g., an account ID taken from the message key so that the
	// handler's account keys and the inbox keys share a slot. It must return a non-empty
	// string without '{' or '}'. Defaults to DefaultHashTag.
	HashTag func(consumer, key string) string

	// CheckSlots makes Commit refuse, with ErrCrossSlot, a handler command whose keys are
	// not in the claim's hash slot. It is always on for a *redis.ClusterClient; turn it
	// on with a single Redis to catch, in development, what a Cluster would refuse.
	// Defaults to false.
	CheckSlots bool

	// Replicas, when above zero, makes Commit send WAIT after the commit and report it
	// only once that many replicas acknowledged it (ErrNotReplicated otherwise, so the
	// message is nacked). Without it, a failover to an asynchronous replica can lose the
	// last commits: their keys and effects both, so the redeliveries process them again,
	// once, on the new primary. Defaults to 0, no WAIT.
	Replicas int

	// ReplicaTimeout bounds the WAIT for Replicas. Defaults to DefaultReplicaTimeout, 1s.
	ReplicaTimeout time.Duration

	// DangerouslyProcessWithoutDedupWhenUnreachable makes the store, when Redis cannot
	// be reached, let the handler run anyway, without deduplication, and log each such
	// message at error level: availability over exactly-once, as some seeds do. Effects
	// the handler queued in Redis are still attempted at commit (and fail while Redis is
	// down, nacking the message). Off, the store fails closed: the claim fails and the
	// message is nacked, never processed without deduplication. Requires Logger.
	// Defaults to false.
	DangerouslyProcessWithoutDedupWhenUnreachable bool

	// Logger receives the errors of DangerouslyProcessWithoutDedupWhenUnreachable.
	// Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Wait == 0 {
		c.Wait = c.Lease
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.HashTag == nil {
		c.HashTag = DefaultHashTag
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = DefaultReplicaTimeout
	}
}

func (c *Config) validate() error {
	var errs []error
	if strings.ContainsAny(c.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("Prefix %q contains a brace: remove it, the store puts the hash tag in braces itself", c.Prefix))
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"Lease", c.Lease}, {"Wait", c.Wait}, {"Retention", c.Retention}, {"ReplicaTimeout", c.ReplicaTimeout}} {
		if d.d < time.Millisecond {
			errs = append(errs, fmt.Errorf("%s is %v: use at least 1ms, or 0 for the default", d.name, d.d))
		}
	}
	if c.Retention < c.Lease {
		errs = append(errs, fmt.Errorf("Retention (%v) is shorter than Lease (%v): keep keys longer than a claim lasts", c.Retention, c.Lease))
	}
	if c.Replicas < 0 {
		errs = append(errs, fmt.Errorf("Replicas is %d: use 0 for no WAIT, or the number of replicas to wait for", c.Replicas))
	}
	if c.DangerouslyProcessWithoutDedupWhenUnreachable && c.Logger == nil {
		errs = append(errs, errors.New("DangerouslyProcessWithoutDedupWhenUnreachable is set without a Logger: set Logger, so each message processed without deduplication is logged"))
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	return errors.Join(errs...)
}
