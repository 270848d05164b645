package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxkgo"
)

// -transport kgo: the workers consume the Kafka topic with inboxkgo, a batch at a time
// (ProcessBatch in key mode, ProcessOffsets in offset mode), in one consumer group.
// With -poison N, N of the messages are records the loop cannot process: in key mode
// every other one has no key (its UUID header left out), and the others carry a header
// that makes the handler name them with a permanent RecordError. inboxkgo's
// DefaultOnError skips them to the run's dead-letter topic (<run>-dead-letters), which
// the parent reads at the end: every poison message must be there, and nothing else.

// Poison kinds, in a record's poisonHeader.
const (
	poisonNoKey   = "nokey"   // no _watermill_message_uuid header: ErrNoKey
	poisonHandler = "handler" // the handler refuses it for good
)

const (
	poisonHeader = "torture_poison"
	idHeader     = "torture_id" // the message's key, on every record, for the reports
)

// errPoison is what the handler says of a poison record.
var errPoison = inbox.MarkPermanent(errors.New("poison record: the handler cannot process it"))

// poisonKind returns message i's poison kind, "" for a healthy message: -poison
// messages spread over the run, every other one without a key in key mode.
func (o options) poisonKind(i int) string {
	if o.poison == 0 {
		return ""
	}
	step := o.messages / o.poison
	if i%step != step/2 || i/step >= o.poison {
		return ""
	}
	if o.mode == "keys" && (i/step)%2 == 0 {
		return poisonNoKey
	}
	return poisonHandler
}

func deadLetterTopic(o options) string { return o.run + "-dead-letters" }

// kgoClientOpts are the workers' franz-go settings, as saramaConfig's for Sarama: a new
// group reads from the start, short long-polls, a 2 s session and 500 ms heartbeats so
// that a killed member's partitions move on quickly, a 3 s rebalance timeout, and each
// worker slot a static member (KIP-345).
func kgoClientOpts(o options) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(kafkaBrokers(o)...), kgo.ConsumerGroup(o.run), kgo.ConsumeTopics(o.run),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond), kgo.RebalanceTimeout(3 * time.Second),
		kgo.InstanceID(fmt.Sprintf("%s-%d", o.run, o.slot))}
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// kgo consumes with an inboxkgo loop until killed or stdin closes.
func (w *worker) kgo(ctx context.Context) error {
	dlq, err := kgo.NewClient(kgo.SeedBrokers(kafkaBrokers(w.o)...))
	if err != nil {
		return err
	}
	defer dlq.Close()
	deadLetters := inboxkgo.ToTopic(dlq, deadLetterTopic(w.o))
	var mu sync.Mutex
	skipped := map[[2]any]bool{} // topic/partition/offset → skipped: reported already
	at := func(r *kgo.Record) [2]any { return [2]any{r.Partition, r.Offset} }
	cfg := inboxkgo.Config{Inbox: w.ib, Consumer: consumer, Offsets: w.o.mode == "offsets", MaxPollRecords: 20,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: time.Second, Logger: stderrLogger{},
		Handle: func(ctx context.Context, records []*kgo.Record) error {
			// A batch fails with probability fail-rate, decided first, so that a batch
			// holding a poison record can fail too (at the poison record, after crediting
			// the records before it): with -poison, most of a small run's batches hold one.
			inject := rand.Float64() < w.o.failRate
			credited := records
			for n, r := range records {
				if header(r, poisonHeader) != "" {
					if inject {
						credited = records[:n]
						break
					}
					return &inboxkgo.RecordError{Record: r, Err: errPoison}
				}
				key := header(r, idHeader)
				i, err := messageIndex(key)
				if err != nil {
					return err
				}
				if err := w.db.credit(ctx, key, i%w.o.accounts, i+1); err != nil {
					return err
				}
			}
			if inject {
				for _, r := range credited {
					report("fail %s %s injected", header(r, idHeader), header(r, copyMetadata))
				}
				return errInjected
			}
			return nil
		},
		OnError: func(ctx context.Context, f inboxkgo.Failure) inboxkgo.Action {
			action := inboxkgo.DefaultOnError(ctx, f)
			if action == inboxkgo.Retry && !errors.Is(f.Err, errInjected) { // injected: reported per record by the handler
				r := f.Records[0]
				fmt.Fprintf(os.Stderr, "worker %d: batch of %s copy %s failed, retrying: %v\n", os.Getpid(), header(r, idHeader), header(r, copyMetadata), f.Err)
				report("fail %s %s db", header(r, idHeader), header(r, copyMetadata))
			}
			return action
		},
		Skip: inboxkgo.DestinationFunc(func(ctx context.Context, r *kgo.Record, reason error) error {
			if err := deadLetters.Accept(ctx, r, reason); err != nil {
				return err
			}
			mu.Lock()
			skipped[at(r)] = true
			mu.Unlock()
			report("skip %s %s", header(r, idHeader), header(r, copyMetadata))
			return nil
		}),
		Committed: func(records []*kgo.Record, res inbox.BatchResult) {
			crash := rand.Float64() < w.o.crashRate // committed in the database, never in Kafka
			mu.Lock()
			defer mu.Unlock()
			defer func() {
				if crash {
					report("crash %s %s", header(records[0], idHeader), header(records[0], copyMetadata))
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
					select {} // the signal is on its way
				}
			}()
			for i, r := range records {
				key, copy := header(r, idHeader), header(r, copyMetadata)
				switch {
				case skipped[at(r)]:
				case res.Duplicate[i]:
					report("dup %s %s", key, copy)
				default:
					report("ok %s %s", key, copy)
				}
			}
		},
	}
	if !cfg.Offsets {
		cfg.Key = inboxkgo.WatermillUUID
	}
	c, err := inboxkgo.New(cfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(c.Opts(), kgoClientOpts(w.o)...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the parent closes stdin to stop the worker
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		cancel()
	}()
	report("ready")
	for ctx.Err() == nil {
		if err := c.Run(ctx, cl); err != nil { // OnError stopped: a permanent error of a batch
			fmt.Fprintf(os.Stderr, "worker %d: the loop stopped: %v\n", os.Getpid(), err)
			time.Sleep(time.Second)
		}
	}
	return nil
}

// stderrLogger logs the loop's errors (failed batches and their decisions) to stderr,
// which the parent prints unless -quiet.
type stderrLogger struct{}

func (stderrLogger) Error(msg string, err error, fields watermill.LogFields) {
	fmt.Fprintf(os.Stderr, "%s: %v %v\n", msg, err, fields)
}
func (stderrLogger) Info(string, watermill.LogFields)                   {}
func (stderrLogger) Debug(string, watermill.LogFields)                  {}
func (stderrLogger) Trace(string, watermill.LogFields)                  {}
func (l stderrLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// deadLetters reads the run's dead-letter topic to its end and returns how many records
// of each message it holds.
func deadLetters(ctx context.Context, o options) (map[string]int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaBrokers(o)...), kgo.ConsumeTopics(deadLetterTopic(o)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	got := map[string]int{}
	idle := 0
	for idle < 5 { // the topic is complete: the workers are dead; stop after a few empty polls
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if fetches.Empty() {
			idle++
			continue
		}
		idle = 0
		fetches.EachRecord(func(r *kgo.Record) { got[header(r, idHeader)]++ })
	}
	return got, nil
}

// checkDeadLetters compares the dead-letter topic with the poison messages: each there
// at least once, no healthy message there.
func checkDeadLetters(o options, got map[string]int) []string {
	var problems []string
	for i := range o.messages {
		key := "m" + strconv.Itoa(i)
		switch {
		case o.poisonKind(i) != "" && got[key] == 0:
			problems = append(problems, fmt.Sprintf("poison message %s (%s) is not in the dead-letter topic", key, o.poisonKind(i)))
		case o.poisonKind(i) == "" && got[key] > 0:
			problems = append(problems, fmt.Sprintf("healthy message %s was skipped to the dead-letter topic", key))
		}
	}
	return problems
}
