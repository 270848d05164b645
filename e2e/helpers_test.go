// Package e2e_test runs the inbox middleware against the real brokers (RabbitMQ through
// watermill-amqp v2 and v3, the Kafka dev broker through watermill-kafka and Sarama, NATS
// JetStream through watermill-nats v2, Redis Streams through watermill-redisstream) and
// the real PostgreSQL, with real redeliveries: a consumer process SIGKILLed between its
// database commit and its ack or offset commit, a rebalance, nacks.
package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	amqpv2 "github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	amqpv3 "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/amqpkey"
	"github.com/watermill-inbox/inbox/internal/brokertest"
	"github.com/watermill-inbox/inbox/kafkakey"
)

// wait bounds every wait for a broker to deliver.
const wait = 30 * time.Second

var logger = watermill.NopLogger{}

// amqpVersions are the watermill-amqp versions the RabbitMQ tests run with.
var amqpVersions = []string{"v2", "v3"}

// amqpSubscriber returns a durable-queue subscriber of the given watermill-amqp version
// with the amqpkey marshaler, after declaring queue (the durable-queue publisher does
// not declare it, so messages published before would be dropped).
func amqpSubscriber(t testing.TB, version, url, queue string) message.Subscriber {
	t.Helper()
	var sub interface {
		message.Subscriber
		SubscribeInitialize(topic string) error
	}
	var err error
	switch version {
	case "v2":
		cfg := amqpv2.NewDurableQueueConfig(url)
		cfg.Marshaler = amqpkey.Marshaler{Inner: amqpv2.DefaultMarshaler{}}
		sub, err = amqpv2.NewSubscriber(cfg, logger)
	case "v3":
		cfg := amqpv3.NewDurableQueueConfig(url)
		cfg.Marshaler = amqpkey.Marshaler{Inner: amqpv3.DefaultMarshaler{}}
		sub, err = amqpv3.NewSubscriber(cfg, logger)
	default:
		t.Fatalf("unknown watermill-amqp version %q", version)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	require.NoError(t, sub.SubscribeInitialize(queue))
	return sub
}

// amqpPublisher returns a durable-queue publisher of the given watermill-amqp version.
func amqpPublisher(t testing.TB, version, url string) message.Publisher {
	t.Helper()
	var pub message.Publisher
	var err error
	switch version {
	case "v2":
		cfg := amqpv2.NewDurableQueueConfig(url)
		cfg.Marshaler = amqpkey.Marshaler{}
		pub, err = amqpv2.NewPublisher(cfg, logger)
	case "v3":
		cfg := amqpv3.NewDurableQueueConfig(url)
		cfg.Marshaler = amqpkey.Marshaler{}
		pub, err = amqpv3.NewPublisher(cfg, logger)
	default:
		t.Fatalf("unknown watermill-amqp version %q", version)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// rawAMQPPublish publishes with amqp091 directly, as a non-Watermill producer would.
func rawAMQPPublish(t testing.TB, url, queue string, pubs ...amqp091.Publishing) {
	t.Helper()
	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	for _, p := range pubs {
		require.NoError(t, ch.PublishWithContext(context.Background(), "", queue, false, false, p))
	}
}

// kafkaSubscriber returns a watermill-kafka subscriber in group (none: no group, no
// offset commits, every run reads from the oldest offset).
func kafkaSubscriber(t testing.TB, brokers []string, group string, sc *sarama.Config) message.Subscriber {
	t.Helper()
	if sc == nil {
		sc = brokertest.SaramaSubscriberConfig()
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers: brokers, Unmarshaler: kafka.DefaultMarshaler{}, OverwriteSaramaConfig: sc, ConsumerGroup: group,
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func kafkaPublisher(t testing.TB, brokers []string) message.Publisher {
	t.Helper()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.DefaultMarshaler{}}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// rawKafkaProducer is a plain Sarama producer, as a non-Watermill producer would use.
func rawKafkaProducer(t testing.TB, brokers []string) sarama.SyncProducer {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(brokers, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// setup is what one test writes to: its own inbox and ledger tables.
type setup struct {
	pool        *pgxpool.Pool
	inboxTable  string
	store       *inbox.PostgresStore
	ledger      brokertest.Ledger
	ledgerTable string
}

func newSetup(t testing.TB) setup {
	t.Helper()
	pool := brokertest.PgPool(t)
	s := setup{pool: pool, inboxTable: brokertest.Name("inbox"), ledgerTable: brokertest.Name("ledger")}
	s.store = brokertest.Store(t, pool, s.inboxTable, true)
	s.ledger = brokertest.NewLedger(t, pool, s.ledgerTable, true)
	return s
}

func (s setup) inbox(t testing.TB, key inbox.KeyFunc, obs inbox.Observer) *inbox.Inbox {
	t.Helper()
	ib, err := inbox.New(inbox.Config{Store: s.store, Key: key, Observer: obs})
	require.NoError(t, err)
	return ib
}

// runRouter runs a router set up by add until the test ends, and returns once it runs.
func runRouter(t testing.TB, add func(r *message.Router)) (stop func()) {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	require.NoError(t, err)
	add(router)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-done:
		cancel()
		t.Fatalf("router stopped before running: %v", err)
	case <-time.After(wait):
		cancel()
		t.Fatal("router not running after", wait)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("router: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// delivery is one message as a handler chain returned it.
type delivery struct {
	UUID     string
	Payload  string
	Metadata message.Metadata
	Err      error
}

// recorder is a middleware that records every delivery once the inner chain returns.
type recorder struct {
	mu   sync.Mutex
	list []delivery
}

func (r *recorder) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.list = append(r.list, delivery{UUID: msg.UUID, Payload: string(msg.Payload), Metadata: maps.Clone(msg.Metadata), Err: err})
		return out, err
	}
}

func (r *recorder) all() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.list...)
}

// where returns the deliveries for which match is true.
func (r *recorder) where(match func(d delivery) bool) []delivery {
	var out []delivery
	for _, d := range r.all() {
		if match(d) {
			out = append(out, d)
		}
	}
	return out
}

func isDuplicate(d delivery) bool {
	return d.Err == nil && d.Metadata[inbox.MetadataDuplicate] == "true"
}

// ---- child processes ----

// helperArgs configure a consumer child process (TestHelperProcess).
type helperArgs struct {
	Broker      string // "kafka", "amqp", "nats" or "redis"
	Crash       bool   // stop at the first message: see TestHelperProcess
	Brokers     []string
	Topic       string
	Group       string
	AMQPURL     string
	NATSURL     string
	AMQPVersion string
	Queue       string
	InboxTable  string
	LedgerTable string
	Consumer    string
	NATS        natsConsumer // Broker "nats": the stream and durable consumer to bind to
	RedisURL    string       // Broker "redis": Topic is the stream, Group the consumer group
	RedisName   string       // Broker "redis": the consumer's name in the group; "child" if empty
	Offsets     bool         // Broker "kafka": offset mode (kafkakey.Partition) instead of keys
}

const helperEnv = "INBOX_E2E_HELPER"

// child is a consumer process running TestHelperProcess.
type child struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	mu     sync.Mutex
	lines  []string
	exited chan struct{}
}

// startChild re-executes the test binary as a consumer process.
func startChild(t *testing.T, args helperArgs) *child {
	t.Helper()
	return startHelper(t, "TestHelperProcess", helperEnv, args)
}

// startHelper re-executes the test binary to run test alone, with the JSON of args in
// the environment variable env.
func startHelper(t *testing.T, test, env string, args any) *child {
	t.Helper()
	enc, err := json.Marshal(args)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+string(enc))
	c := &child{cmd: cmd, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = &lockedWriter{w: c.stderr}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "E2E "); ok {
				c.mu.Lock()
				c.lines = append(c.lines, line)
				c.mu.Unlock()
			}
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.kill(t)
		if t.Failed() {
			t.Logf("consumer process %d stderr:\n%s", cmd.Process.Pid, c.stderrText())
		}
	})
	return c
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (c *child) stderrText() string {
	lw := c.cmd.Stderr.(*lockedWriter)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.String()
}

// count returns how many lines the child printed with the verb ("processed", ...).
func (c *child) count(verb string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.lines {
		if strings.HasPrefix(l, verb+" ") {
			n++
		}
	}
	return n
}

// waitFor waits until the child printed n lines with the verb, and returns the first
// one's argument.
func (c *child) waitFor(t *testing.T, verb string, n int) string {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		c.mu.Lock()
		var first string
		found := 0
		for _, l := range c.lines {
			if arg, ok := strings.CutPrefix(l, verb+" "); ok {
				if found == 0 {
					first = arg
				}
				found++
			}
		}
		c.mu.Unlock()
		if found >= n {
			return first
		}
		select {
		case <-c.exited:
			t.Fatalf("consumer process exited before printing %d %q lines; stderr:\n%s", n, verb, c.stderrText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer process printed %d of %d %q lines in %v; stderr:\n%s", found, n, verb, wait, c.stderrText())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill SIGKILLs the child and waits for it to exit.
func (c *child) kill(t testing.TB) {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(wait):
		t.Errorf("consumer process %d still running %v after SIGKILL", c.cmd.Process.Pid, wait)
	}
}

// TestHelperProcess is the consumer process of the crash and rebalance tests: they
// re-execute the test binary with INBOX_E2E_HELPER set to the JSON of helperArgs. It
// consumes with the inbox middleware and a ledger handler, prints "E2E processed <uuid>"
// or "E2E duplicate <uuid>" per message, and runs until killed.
//
// With Crash, the first message processed ends its run in the state the inbox exists
// for: on Kafka, the process prints "E2E acked <uuid>" once the router acked it (the
// offset is only marked: auto-commit runs every hour), on RabbitMQ, NATS JetStream and
// Redis Streams "E2E committed <uuid>" once the inbox committed and before the router
// acks; then it blocks every message, waiting for the SIGKILL.
func TestHelperProcess(t *testing.T) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		t.Skip("the consumer process of the crash tests; it runs only when they re-execute the test binary")
	}
	var args helperArgs
	require.NoError(t, json.Unmarshal([]byte(raw), &args))

	pool := brokertest.PgPool(t)
	store := brokertest.Store(t, pool, args.InboxTable, false)
	ledger := brokertest.Ledger{Pool: pool, Table: args.LedgerTable}
	cfg := inbox.Config{Store: store, Consumer: args.Consumer}
	if args.Offsets {
		cfg.Position = kafkakey.Partition
	}
	ib, err := inbox.New(cfg)
	require.NoError(t, err)

	var sub message.Subscriber
	topic := args.Topic
	switch args.Broker {
	case "kafka":
		sc := brokertest.SaramaSubscriberConfig()
		sc.Consumer.Offsets.AutoCommit.Interval = time.Hour // acked offsets stay uncommitted until killed
		sub = kafkaSubscriber(t, args.Brokers, args.Group, sc)
	case "amqp":
		sub = amqpSubscriber(t, args.AMQPVersion, args.AMQPURL, args.Queue)
		topic = args.Queue
	case "nats":
		sub = natsSubscriber(t, args.NATSURL, args.NATS)
	case "redis":
		name := args.RedisName
		if name == "" {
			name = "child"
		}
		sub = redisSubscriber(t, args.RedisURL, args.Group, name)
	default:
		t.Fatalf("unknown broker %q", args.Broker)
	}

	var stopped atomic.Bool
	block := make(chan struct{}) // never closed: the process waits here for its SIGKILL
	report := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if stopped.Load() {
				<-block
			}
			out, err := h(msg)
			switch {
			case err != nil:
				fmt.Printf("E2E failed %s %v\n", msg.UUID, err)
			case msg.Metadata.Get(inbox.MetadataDuplicate) == "true":
				fmt.Printf("E2E duplicate %s\n", msg.UUID)
			default:
				fmt.Printf("E2E processed %s\n", msg.UUID)
				if args.Crash && stopped.CompareAndSwap(false, true) {
					if args.Broker != "kafka" { // the ack would follow
						fmt.Printf("E2E committed %s\n", msg.UUID)
						<-block
					}
					go func() {
						<-msg.Acked()
						fmt.Printf("E2E acked %s\n", msg.UUID)
					}()
				}
			}
			return out, err
		}
	}
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(report, ib.Middleware)
		r.AddConsumerHandler(args.Consumer, topic, sub, func(msg *message.Message) error {
			return ledger.Apply(msg.Context(), args.Broker, msg.UUID)
		})
	})
	fmt.Println("E2E running -")
	<-block
}

// failOnceThenProcess runs a router on sub (topic) whose handler applies each message to
// the ledger as source and fails its first attempt after writing. It waits until msg is
// processed and requires that it came twice, failed and then processed once, not as a
// duplicate: the failed attempt's write rolled back with its key. It returns the two
// deliveries, for the transport's own checks.
func failOnceThenProcess(t *testing.T, s setup, topic string, sub message.Subscriber, source string, msg *message.Message) []delivery {
	t.Helper()
	var outcomes brokertest.Outcomes
	ib := s.inbox(t, nil, &outcomes)
	rec := &recorder{}
	var attempts atomic.Int32
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(rec.middleware, ib.Middleware)
		r.AddConsumerHandler("ledger", topic, sub, func(m *message.Message) error {
			if err := s.ledger.Apply(m.Context(), source, m.UUID); err != nil {
				return err
			}
			if attempts.Add(1) == 1 {
				return errors.New("first attempt fails after writing")
			}
			return nil
		})
	})
	require.Eventually(t, func() bool { return outcomes.Count(inbox.OutcomeProcessed) >= 1 }, wait, 10*time.Millisecond)

	all := rec.all()
	require.Len(t, all, 2)
	require.Error(t, all[0].Err)
	require.NoError(t, all[1].Err)
	require.Equal(t, msg.UUID, all[1].UUID)
	require.False(t, isDuplicate(all[1]))
	require.Equal(t, 1, outcomes.Count(inbox.OutcomeFailed))
	require.Equal(t, 0, outcomes.Count(inbox.OutcomeDuplicate))
	require.Equal(t, 1, s.ledger.Applied(t, msg.UUID))
	return all
}

// skippedAfterCrash consumes in place of a child killed after its commit and before its
// ack (inbox consumer "ledger", as the child's): the broker delivers msgUUID again, and
// the inbox must skip it. It returns that delivery, checked to be a duplicate that left
// the ledger with one row.
func skippedAfterCrash(t *testing.T, s setup, topic string, sub message.Subscriber, source, msgUUID string) delivery {
	t.Helper()
	var outcomes brokertest.Outcomes
	rec := &recorder{}
	ib, err := inbox.New(inbox.Config{Store: s.store, Consumer: "ledger", Observer: &outcomes})
	require.NoError(t, err)
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(rec.middleware, ib.Middleware)
		r.AddConsumerHandler("restart", topic, sub, func(m *message.Message) error {
			return s.ledger.Apply(m.Context(), source, m.UUID)
		})
	})
	require.Eventually(t, func() bool { return len(rec.all()) >= 1 }, wait, 10*time.Millisecond)

	got := rec.all()[0]
	require.Equal(t, msgUUID, got.UUID)
	require.True(t, isDuplicate(got), "the inbox skipped the redelivery: %+v", got)
	require.Equal(t, 1, outcomes.Count(inbox.OutcomeDuplicate))
	require.Equal(t, 1, s.ledger.Applied(t, msgUUID))
	return got
}
