// Package inboxkgo runs a Kafka consumer loop on franz-go
// (github.com/twmb/franz-go/pkg/kgo) behind the inbox, a batch at a time: it polls
// records, claims them all in one statement (inbox.Inbox.ProcessBatch, or
// ProcessOffsets in offset mode), runs the handler once with the new ones in the
// claimed transaction, commits it, and only then commits the offsets to Kafka. A crash
// between the two commits makes Kafka deliver the batch again; its records are found
// processed and skipped. It lives apart from the inbox package so that the core does
// not import a Kafka client.
//
//	c, _ := inboxkgo.New(inboxkgo.Config{Inbox: ib, Consumer: "billing", Offsets: true, Handle: credit})
//	cl, _ := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers("127.0.0.1:9092"),
//		kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"))...)
//	err := c.Run(ctx, cl)
//
// In key mode (the default) each record needs a key (Config.Key) that is the same on
// every delivery; the keys share the inbox's key space with the middleware's. In
// offset mode (Config.Offsets) records are judged by their position, against one row
// per consumer, topic and partition; on each partition assignment the loop seeks to
// the stored offsets (kgo.AdjustFetchOffsetsFn), so that the database, not Kafka,
// says where consumption resumes, and Kafka's committed offsets serve monitoring.
//
// A batch that fails goes to Config.OnError, which decides: Retry it after a backoff,
// Skip the record it names (to Config.Skip: a dead-letter topic, a log, a store of your
// own) and process the others, or Stop. DefaultOnError retries transient errors, skips
// a record that cannot be processed (no key, a handler's permanent RecordError) when
// there is a destination, and stops on inbox.ErrOffsetRewound and other permanent
// errors. Everything not skipped is processed exactly once, as without failures.
package inboxkgo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
)

// Defaults of Config.
const (
	DefaultMaxPollRecords = 100
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
)

// Config configures a Consumer. Pass it to New, which applies the defaults and
// validates it.
type Config struct {
	// Inbox is the inbox the batches go through; its store must claim batches
	// (inbox.BatchStore) in key mode, or keep offsets (inbox.OffsetStore) in offset
	// mode, and it must not count attempts (inbox.Config.MaxAttempts). Required.
	Inbox *inbox.Inbox

	// Consumer is the inbox consumer the keys or offsets belong to, e.g. the group's
	// name. Required.
	Consumer string

	// Offsets selects offset mode: no key per record, one row per consumer, topic and
	// partition, and the loop seeks to the stored offsets on each assignment. Defaults
	// to false: key mode.
	Offsets bool

	// Key derives a record's key in key mode, the same on every delivery: Header for a
	// header a producer sets, WatermillUUID for records of Watermill's Kafka publisher.
	// An error refuses the batch (wrap inbox.ErrNoKey). Required in key mode; must be
	// nil in offset mode.
	Key func(r *kgo.Record) (inbox.Item, error)

	// Handle runs once per poll with the new records, in order, in the claimed
	// transaction, which ctx carries (inbox.TxFromContext): write through it. Its error
	// rolls everything back, records' claims included, and goes to OnError; a
	// *RecordError names the record it failed on, which OnError may skip. It is not
	// called when every record of a poll is a duplicate (or skipped). Required.
	Handle func(ctx context.Context, records []*kgo.Record) error

	// OnError decides what Run does with a batch that failed: Retry, Skip or Stop (see
	// Action). Defaults to DefaultOnError.
	OnError func(ctx context.Context, f Failure) Action

	// Skip takes the records OnError skips; the offsets move past a record only once it
	// took it. Defaults to nil: nothing is skipped, and a Skip is a Stop.
	Skip Destination

	// MinBackoff is the wait before the first retry of a batch (OnError's Retry); it
	// doubles with each failure of the same batch in a row. Defaults to
	// DefaultMinBackoff, 100ms.
	MinBackoff time.Duration

	// MaxBackoff bounds the wait between two retries. Defaults to DefaultMaxBackoff, 30s.
	MaxBackoff time.Duration

	// MaxPollRecords bounds the records of one poll, and so of one transaction.
	// Defaults to DefaultMaxPollRecords, 100.
	MaxPollRecords int

	// Committed, when set, is called after a batch's database commit and before its
	// Kafka offset commit, with the records the inbox got and what it did with them (a
	// skipped record the inbox refused, such as one without a key, is not among them;
	// one the handler named is, not processed): for metrics, and for tests that kill
	// the process right there.
	Committed func(records []*kgo.Record, res inbox.BatchResult)

	// Logger logs fetch errors, failed Kafka offset commits (the next commit, or a
	// redelivery found processed, makes up for one) and each failed batch with OnError's
	// decision. Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

// Consumer is the loop: see the package doc.
type Consumer struct {
	cfg Config
	// skips are the records the destination took whose batch did not commit yet, and
	// failed the batch that failed last, with its count of failures in a row: Run's
	// state, one Run at a time.
	skips  map[position]skip
	failed struct {
		id       string
		attempts int
	}
}

// New returns a Consumer. It fails when the config is invalid, naming the field.
func New(cfg Config) (*Consumer, error) {
	if cfg.MaxPollRecords == 0 {
		cfg.MaxPollRecords = DefaultMaxPollRecords
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	if cfg.OnError == nil {
		cfg.OnError = DefaultOnError
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	var errs []error
	if cfg.Inbox == nil {
		errs = append(errs, errors.New("Inbox is nil: set it to an inbox.New(...) of a PostgreSQL, MySQL or SQLite store"))
	}
	if cfg.Consumer == "" {
		errs = append(errs, errors.New("Consumer is empty: name the inbox consumer, e.g. the consumer group"))
	}
	switch {
	case cfg.Offsets && cfg.Key != nil:
		errs = append(errs, errors.New("Key is set in offset mode, which judges records by their position: leave it nil, or set Offsets to false"))
	case !cfg.Offsets && cfg.Key == nil:
		errs = append(errs, errors.New("Key is nil in key mode: set it (inboxkgo.Header, inboxkgo.WatermillUUID), or set Offsets for offset mode"))
	}
	if cfg.Handle == nil {
		errs = append(errs, errors.New("Handle is nil: set the function that handles the new records"))
	}
	if cfg.MaxPollRecords < 0 {
		errs = append(errs, fmt.Errorf("MaxPollRecords is %d: use a positive number, or 0 for the default %d", cfg.MaxPollRecords, DefaultMaxPollRecords))
	}
	if cfg.MinBackoff < 0 || cfg.MaxBackoff < cfg.MinBackoff {
		errs = append(errs, fmt.Errorf("MinBackoff is %v and MaxBackoff %v: use positive durations, MaxBackoff at least MinBackoff, or 0 for the defaults %v and %v",
			cfg.MinBackoff, cfg.MaxBackoff, DefaultMinBackoff, DefaultMaxBackoff))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("inboxkgo: invalid config: %w", err)
	}
	return &Consumer{cfg: cfg, skips: map[position]skip{}}, nil
}

// Opts returns the client options the loop needs: no auto-commit (the loop commits
// after the database), rebalances held while a batch is processed
// (kgo.BlockRebalanceOnPoll: a partition cannot move to another member between the
// database commit and the offset commit), and in offset mode the seek to the stored
// offsets on assignment. Add the seed brokers, the consumer group and the topics.
func (c *Consumer) Opts() []kgo.Opt {
	opts := []kgo.Opt{kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll()}
	if c.cfg.Offsets {
		opts = append(opts, kgo.AdjustFetchOffsetsFn(c.seekStored))
	}
	return opts
}

// seekStored moves the assigned partitions that have a stored offset to it. The epoch is
// left out: the inbox checks each record's epoch against the stored one itself, and an
// offset past the log's end (a topic re-created with fewer records) is reset by the
// client (kgo.ConsumeResetOffset), whose first records the inbox then refuses
// (inbox.ErrOffsetRewound) rather than skips. A read that fails (a connection the
// database dropped) is tried again, seekTries times in all, with the backoff of
// retries: an error here fails the member's join to the group, which then rebalances
// again without it.
func (c *Consumer) seekStored(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	var stored []inbox.PartitionOffset
	var err error
	for attempt := 1; ; attempt++ {
		if stored, err = c.cfg.Inbox.Offsets(ctx, c.cfg.Consumer); err == nil {
			break
		}
		err = fmt.Errorf("inboxkgo: reading the stored offsets of consumer %q: %w", c.cfg.Consumer, err)
		if attempt == seekTries || ctx.Err() != nil {
			return nil, err
		}
		c.cfg.Logger.Error("inboxkgo: reading the stored offsets failed: trying again", err, watermill.LogFields{"attempt": attempt})
		if sleep(ctx, c.backoff(attempt)) != nil {
			return nil, err
		}
	}
	for _, o := range stored {
		if parts, ok := assigned[o.Topic]; ok {
			if _, ok := parts[o.Partition]; ok {
				parts[o.Partition] = kgo.NewOffset().At(o.Next).WithEpoch(-1)
			}
		}
	}
	return assigned, nil
}

// seekTries bounds the reads of the stored offsets on one assignment.
const seekTries = 4

// Run polls and processes batches until ctx ends (it then returns nil), or until
// Config.OnError stops on a failed batch: it then moves the batch's partitions back to
// its first records, so that they are polled again, and returns the error; call Run
// again to retry them. Retries wait with the partitions moved back and rebalances
// allowed. cl must have been made with Opts. Run is not safe for concurrent use.
func (c *Consumer) Run(ctx context.Context, cl *kgo.Client) error {
	for {
		fetches := cl.PollRecords(ctx, c.cfg.MaxPollRecords)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			cl.AllowRebalance()
			return nil
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			c.cfg.Logger.Error("inboxkgo: fetch error", err, watermill.LogFields{"topic": topic, "partition": partition})
		})
		records := fetches.Records()
		if len(records) == 0 {
			cl.AllowRebalance()
			continue
		}
		if err := c.batch(ctx, cl, records, topicIDs(fetches)); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// batch processes one polled batch, deciding on its failures, and returns the error
// that stops Run. Rebalances are allowed when it returns.
func (c *Consumer) batch(ctx context.Context, cl *kgo.Client, records []*kgo.Record, ids map[string][]byte) error {
	defer cl.AllowRebalance()
	for {
		res, got, err := c.process(ctx, records, ids)
		if err == nil {
			c.failed.id, c.failed.attempts = "", 0
			if c.cfg.Committed != nil {
				c.cfg.Committed(got, res)
			}
			if err := cl.CommitRecords(ctx, records...); err != nil && ctx.Err() == nil {
				c.cfg.Logger.Error("inboxkgo: committing the offsets to Kafka (the records are committed in the database: a redelivery is skipped)", err,
					watermill.LogFields{"records": len(records)})
			}
			c.forgetSkips(records)
			return nil
		}
		if ctx.Err() != nil {
			rewind(cl, records)
			return nil
		}
		f := c.failure(records, err)
		action := c.cfg.OnError(ctx, f)
		if action == Skip && c.cfg.Skip == nil {
			action = Stop
		}
		fields := watermill.LogFields{"records": len(records), "attempt": f.Attempt, "action": action.String()}
		if f.Record != nil {
			fields = fields.Add(watermill.LogFields{"topic": f.Record.Topic, "partition": f.Record.Partition, "offset": f.Record.Offset})
		}
		switch action {
		case Skip:
			c.cfg.Logger.Error("inboxkgo: a batch failed: skipping", err, fields)
			if err := c.skip(ctx, records, f); err != nil {
				c.cfg.Logger.Error("inboxkgo: the destination did not take the skipped record: retrying the batch", err, fields)
				c.retry(ctx, cl, records, f.Attempt)
				return nil
			}
			continue // the same records, the skipped ones set aside
		case Stop:
			c.cfg.Logger.Error("inboxkgo: a batch failed: stopping", err, fields)
			rewind(cl, records)
			return f.Err
		default:
			c.cfg.Logger.Error("inboxkgo: a batch failed: retrying", err, fields)
			c.retry(ctx, cl, records, f.Attempt)
			return nil
		}
	}
}

// process runs one batch through the inbox, without the skipped records the inbox
// refused, and with the handler kept from those it named; it returns the records the
// inbox got. An error that names a record is a *namedError.
func (c *Consumer) process(ctx context.Context, records []*kgo.Record, ids map[string][]byte) (inbox.BatchResult, []*kgo.Record, error) {
	batch := records
	if len(c.skips) > 0 {
		batch = make([]*kgo.Record, 0, len(records))
		for _, r := range records {
			if s, ok := c.skips[positionOf(r)]; !ok || s.claim {
				batch = append(batch, r)
			}
		}
	}
	handle := func(ctx context.Context, fresh []*kgo.Record) error {
		if len(c.skips) > 0 {
			kept := make([]*kgo.Record, 0, len(fresh))
			for _, r := range fresh {
				if _, skipped := c.skips[positionOf(r)]; !skipped {
					kept = append(kept, r)
				}
			}
			fresh = kept
		}
		if len(fresh) == 0 {
			return nil
		}
		err := c.cfg.Handle(ctx, fresh)
		var re *RecordError
		if errors.As(err, &re) && re.Record != nil {
			return &namedError{record: re.Record, err: err, handler: true}
		}
		return err
	}
	var res inbox.BatchResult
	var err error
	if c.cfg.Offsets {
		position := func(r *kgo.Record) (inbox.Position, error) {
			p := Position(r)
			p.TopicID = ids[r.Topic]
			return p, nil
		}
		res, err = inbox.ProcessOffsetsOf(ctx, c.cfg.Inbox, c.cfg.Consumer, batch, position, handle)
	} else {
		res, err = inbox.ProcessBatchOf(ctx, c.cfg.Inbox, c.cfg.Consumer, batch, c.cfg.Key, handle)
	}
	var named *namedError
	var item *inbox.BatchItemError
	switch {
	case err == nil, errors.As(err, &named):
	case errors.As(err, &item) && item.Index >= 0 && item.Index < len(batch):
		err = &namedError{record: batch[item.Index], err: err}
	}
	return res, batch, err
}

// topicIDs returns the IDs of the fetched topics the broker reported.
func topicIDs(fetches kgo.Fetches) map[string][]byte {
	ids := map[string][]byte{}
	fetches.EachTopic(func(t kgo.FetchTopic) {
		if t.TopicID != [16]byte{} {
			ids[t.Topic] = append([]byte(nil), t.TopicID[:]...)
		}
	})
	return ids
}

// rewind moves each partition of records back to its first record, so that the next
// poll returns them again.
func rewind(cl *kgo.Client, records []*kgo.Record) {
	to := map[string]map[int32]kgo.EpochOffset{}
	for _, r := range records {
		parts := to[r.Topic]
		if parts == nil {
			parts = map[int32]kgo.EpochOffset{}
			to[r.Topic] = parts
		}
		if first, ok := parts[r.Partition]; !ok || r.Offset < first.Offset {
			parts[r.Partition] = kgo.EpochOffset{Epoch: -1, Offset: r.Offset}
		}
	}
	cl.SetOffsets(to)
}
