package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// DefaultMinRetention is PurgeConfig.MinRetention's default: seven days, Kafka's default
// topic retention (retention.ms).
const DefaultMinRetention = contract.DefaultMinRetention

// DefaultPurgeBatch is PurgeConfig.BatchSize's default.
const DefaultPurgeBatch = 10_000

// PurgeConfig configures Purge and PurgeEvery.
type PurgeConfig struct {
	// OlderThan is the age of the keys to delete: keys processed more than OlderThan ago
	// go. It must be positive. Required.
	OlderThan time.Duration

	// MinRetention is how long a message can come back after it was first processed:
	// the topic's retention, the dead-letter queue's replay window, the broker's
	// redelivery horizon, whichever is longest. A purge whose OlderThan is shorter is
	// refused with ErrRetention unless Force is set, because a purged key makes the next
	// delivery of its message new again. Defaults to DefaultMinRetention (168h).
	MinRetention time.Duration

	// Force purges even when OlderThan is shorter than MinRetention. Defaults to false.
	Force bool

	// BatchSize bounds the keys each transaction deletes, so that no long DELETE holds
	// locks or bloats one transaction while consumers run. Defaults to DefaultPurgeBatch
	// (10000).
	BatchSize int

	// Pause is waited between two batches, to leave the database some air on a large
	// purge. Defaults to 0, no pause.
	Pause time.Duration

	// Progress, when set, is called after each batch with the number of keys deleted so
	// far by this purge. Defaults to nil.
	Progress func(deleted int64)

	// Logger is where PurgeEvery reports each run and each failed run. Defaults to
	// watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

func (c *PurgeConfig) setDefaults() {
	if c.MinRetention == 0 {
		c.MinRetention = DefaultMinRetention
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultPurgeBatch
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
}

func (c *PurgeConfig) validate() error {
	var errs []error
	if c.OlderThan <= 0 {
		errs = append(errs, fmt.Errorf("OlderThan is %v: set the age of the keys to delete, longer than a message can come back (e.g. 720h)", c.OlderThan))
	}
	if c.MinRetention < 0 {
		errs = append(errs, fmt.Errorf("MinRetention is %v: use a positive duration, or 0 for the default %v", c.MinRetention, DefaultMinRetention))
	}
	if c.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("BatchSize is %d: use a positive number of keys, or 0 for the default %d", c.BatchSize, DefaultPurgeBatch))
	}
	if c.Pause < 0 {
		errs = append(errs, fmt.Errorf("Pause is %v: use 0 for no pause, or a positive duration", c.Pause))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("inbox: invalid purge config: %w", err)
	}
	if c.OlderThan < c.MinRetention && !c.Force {
		return fmt.Errorf("inbox: refusing to purge keys younger than %v: %w (%v): a message redelivered after its key is purged is processed again; purge older keys, lower MinRetention if messages cannot come back that late, or set Force",
			c.OlderThan, ErrRetention, c.MinRetention)
	}
	return nil
}

// Purge deletes the keys processed more than cfg.OlderThan ago, and the attempt rows
// of keys that started that long ago and never committed, in batches of cfg.BatchSize
// keys, each its own short transaction, until none is left. It returns how many keys it
// deleted, also when ctx ends or a batch fails midway. The cutoff is computed once, from
// this process's clock, when Purge starts.
//
// A purged key makes the next delivery of its message new again: keep keys longer than a
// message can come back (see PurgeConfig.MinRetention).
//
// On a TenantStore, with no tenant in ctx, it purges every tenant (PurgeTenants) and
// returns the keys deleted in all of them; one tenant failing does not stop the others,
// and the error names each that failed. With a tenant in ctx it purges that one.
func Purge(ctx context.Context, store Store, cfg PurgeConfig) (int64, error) {
	if store == nil {
		return 0, errors.New("inbox: invalid purge config: store is nil: pass the Store the inbox uses")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	n, _, err := purgeAny(ctx, store, cfg, time.Now().Add(-cfg.OlderThan))
	return n, err
}

func purge(ctx context.Context, store Store, cfg PurgeConfig, before time.Time) (int64, error) {
	n, err := purgeRows(ctx, store, cfg, before)
	return n.Keys, err
}

// purgeBatcher deletes a batch: a Store, or a PurgeTurn on its own session.
type purgeBatcher interface {
	PurgeBatch(ctx context.Context, before time.Time, limit int) (Purged, error)
}

// purgeRows deletes in batches until a batch finds fewer keys and attempt rows than
// cfg.BatchSize, and returns how many of each it deleted.
func purgeRows(ctx context.Context, b purgeBatcher, cfg PurgeConfig, before time.Time) (Purged, error) {
	var total Purged
	for {
		n, err := b.PurgeBatch(ctx, before, cfg.BatchSize)
		total.Keys += n.Keys
		total.Attempts += n.Attempts
		if err != nil {
			return total, err
		}
		if cfg.Progress != nil {
			cfg.Progress(total.Keys)
		}
		if n.Keys < int64(cfg.BatchSize) && n.Attempts < int64(cfg.BatchSize) {
			return total, nil
		}
		if err := sleep(ctx, cfg.Pause); err != nil {
			return total, err
		}
	}
}

// PurgeEvery purges now and then every interval, in the calling goroutine, until ctx
// ends; it then returns nil. A failed purge is logged with cfg.Logger and tried again at
// the next interval; an invalid config is returned at once. On a TenantStore it purges
// every tenant at each run, as Purge does, and logs each tenant that failed. Run it in a goroutine of
// your own, next to the router:
//
//	go func() { _ = inbox.PurgeEvery(ctx, store, time.Hour, inbox.PurgeConfig{OlderThan: 30 * 24 * time.Hour}) }()
func PurgeEvery(ctx context.Context, store Store, interval time.Duration, cfg PurgeConfig) error {
	if interval <= 0 {
		return fmt.Errorf("inbox: invalid purge interval %v: use a positive duration, e.g. time.Hour", interval)
	}
	if store == nil {
		return errors.New("inbox: invalid purge config: store is nil: pass the Store the inbox uses")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	for {
		start := time.Now()
		n, purges, err := purgeAny(ctx, store, cfg, start.Add(-cfg.OlderThan))
		fields := watermill.LogFields{"deleted": n, "older_than": cfg.OlderThan.String(), "took": time.Since(start).String()}
		if purges != nil {
			fields = fields.Add(watermill.LogFields{"tenants": len(purges)})
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case purges != nil: // every tenant: a line for each that failed, and the summary
			fields = fields.Add(watermill.LogFields{"failed": logTenantPurges(cfg.Logger, purges, fields)})
			cfg.Logger.Info("inbox: purged keys", fields)
		case err != nil:
			cfg.Logger.Error("inbox: purge failed, trying again at the next interval", err, fields)
		default:
			cfg.Logger.Info("inbox: purged keys", fields)
		}
		if sleep(ctx, interval) != nil {
			return nil
		}
	}
}

// sleep waits d, or less if ctx ends, and then returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
