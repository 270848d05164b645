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
package inboxkgo

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
)

// DefaultMaxPollRecords is Config.MaxPollRecords's default.
const DefaultMaxPollRecords = 100

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
	// rolls everything back, records' claims included, and stops Run. It is not called
	// when every record of a poll is a duplicate. Required.
	Handle func(ctx context.Context, records []*kgo.Record) error

	// MaxPollRecords bounds the records of one poll, and so of one transaction.
	// Defaults to DefaultMaxPollRecords, 100.
	MaxPollRecords int

	// Committed, when set, is called after a batch's database commit and before its
	// Kafka offset commit, with the polled records and what the inbox did with them:
	// for metrics, and for tests that kill the process right there.
	Committed func(records []*kgo.Record, res inbox.BatchResult)

	// Logger logs fetch errors and failed Kafka offset commits (the next commit, or a
	// redelivery found processed, makes up for one). Defaults to watermill.NopLogger.
	Logger watermill.LoggerAdapter
}

// Consumer is the loop: see the package doc.
type Consumer struct {
	cfg Config
}

// New returns a Consumer. It fails when the config is invalid, naming the field.
func New(cfg Config) (*Consumer, error) {
	if cfg.MaxPollRecords == 0 {
		cfg.MaxPollRecords = DefaultMaxPollRecords
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
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
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("inboxkgo: invalid config: %w", err)
	}
	return &Consumer{cfg: cfg}, nil
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
// (inbox.ErrOffsetRewound) rather than skips.
func (c *Consumer) seekStored(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	stored, err := c.cfg.Inbox.Offsets(ctx, c.cfg.Consumer)
	if err != nil {
		return nil, fmt.Errorf("inboxkgo: reading the stored offsets of consumer %q: %w", c.cfg.Consumer, err)
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

// Run polls and processes batches until ctx ends (it then returns nil) or a batch
// fails: then it moves the failed batch's partitions back to its first records, so
// that they are polled again, and returns the error; call Run again to retry them. A
// *inbox.BatchItemError names a record that refuses the batch whatever the retry (no
// key, inbox.ErrOffsetRewound): route it away before retrying. cl must have been made
// with Opts.
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
		res, err := c.process(ctx, records, topicIDs(fetches))
		if err != nil {
			rewind(cl, records)
			cl.AllowRebalance()
			return err
		}
		if c.cfg.Committed != nil {
			c.cfg.Committed(records, res)
		}
		if err := cl.CommitRecords(ctx, records...); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Error("inboxkgo: committing the offsets to Kafka (the records are committed in the database: a redelivery is skipped)", err,
				watermill.LogFields{"records": len(records)})
		}
		cl.AllowRebalance()
	}
}

// process runs one batch through the inbox.
func (c *Consumer) process(ctx context.Context, records []*kgo.Record, ids map[string][]byte) (inbox.BatchResult, error) {
	if c.cfg.Offsets {
		position := func(r *kgo.Record) (inbox.Position, error) {
			p := Position(r)
			p.TopicID = ids[r.Topic]
			return p, nil
		}
		return inbox.ProcessOffsetsOf(ctx, c.cfg.Inbox, c.cfg.Consumer, records, position, c.cfg.Handle)
	}
	return inbox.ProcessBatchOf(ctx, c.cfg.Inbox, c.cfg.Consumer, records, c.cfg.Key, c.cfg.Handle)
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

// Position is a record's position, for offset mode: its topic, partition, offset,
// leader epoch and time (the topic's ID is in the fetch, not the record: Run adds it).
func Position(r *kgo.Record) inbox.Position {
	epoch := r.LeaderEpoch
	if epoch < 0 {
		epoch = inbox.NoLeaderEpoch
	}
	return inbox.Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, LeaderEpoch: epoch, Timestamp: r.Timestamp}
}

// Header returns a Config.Key that keys a record by a header's value; a record without
// it has no key (inbox.ErrNoKey).
func Header(name string) func(r *kgo.Record) (inbox.Item, error) {
	return func(r *kgo.Record) (inbox.Item, error) {
		for _, h := range r.Headers {
			if h.Key == name && len(h.Value) > 0 {
				return inbox.Item{Key: string(h.Value)}, nil
			}
		}
		return inbox.Item{}, fmt.Errorf("%w: record %s/%d/%d has no %q header", inbox.ErrNoKey, r.Topic, r.Partition, r.Offset, name)
	}
}

// WatermillUUIDHeader is the header Watermill's Kafka marshaler
// (watermill-kafka's DefaultMarshaler) puts a message's UUID in.
const WatermillUUIDHeader = "_watermill_message_uuid"

// WatermillUUID is a Config.Key for records of Watermill's Kafka publisher: the message
// UUID, the key inbox.KeyFromUUID gives the same message behind the middleware.
var WatermillUUID = Header(WatermillUUIDHeader)
