package outbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/outbox"
)

// The crash test runs the billing consumer (Kafka → inbox → wallet credit + outbox) as a
// real child process: this test binary, re-executed with OUTBOX_HELPER=billing so that
// only TestHelperProcess runs. The parent kills it with SIGKILL right after its commit,
// before the router acks the Kafka record, so the offset is never committed; then starts
// it again.

const helperEnv = "OUTBOX_HELPER"

type orderPaid struct {
	OrderID       string `json:"order_id"`
	CashbackCents int64  `json:"cashback_cents"`
}

type cashbackCredited struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

func TestCrashAfterCommitEachEffectHappensOnce(t *testing.T) {
	t.Parallel()
	brokers := kafkaBrokers(t)
	pool := pgPool(t)
	_, inboxTable := newInbox(t, pool, "billing") // the child's inbox table
	wallet := newWallet(t, pool)
	ob := newOutbox(t, pool)
	queue, amqpPub, amqpSub := amqpQueue(t)
	r := newReceipts(t, pool)
	notified := runNotifications(t, pool, amqpSub, queue, r)
	runForwarder(t, pool, ob, "forwarder", amqpPub)

	topic := sqltest.Name("orders")
	deleteKafkaTopicLater(t, brokers, topic)
	order := sqltest.Name("order")
	payload, err := json.Marshal(orderPaid{OrderID: order, CashbackCents: 190})
	require.NoError(t, err)
	require.NoError(t, kafkaPublisher(t, brokers).Publish(topic, message.NewMessage(order, payload)))

	env := []string{
		helperEnv + "=billing",
		"KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"INBOX_POSTGRES_DSN=" + postgresDSN(),
		"OUTBOX_INBOX_TABLE=" + inboxTable,
		"OUTBOX_WALLET_TABLE=" + wallet,
		"OUTBOX_FORWARDER_TOPIC=" + ob.Config().ForwarderTopic,
		"OUTBOX_ORDERS_TOPIC=" + topic,
		"OUTBOX_GROUP=" + sqltest.Name("billing"),
		"OUTBOX_CASHBACK_QUEUE=" + queue,
	}

	// 1. The billing process commits, and is killed before it acks the record.
	first := startHelper(t, append(env, "OUTBOX_CRASH_AFTER_COMMIT=1"))
	require.Equal(t, "COMMITTED "+order, first.line(t))
	first.kill(t)
	require.Equal(t, 1, credits(t, pool, wallet), "the commit survived the kill")
	eventID := outbox.MessageID("billing", order, "CashbackCredited")
	require.Equal(t, []string{eventID}, outboxRows(t, pool, ob), "the outbox row committed with it")

	// 2. Restarted, it gets the record again (its offset was never committed): the
	// inbox skips it, so it neither credits nor emits again.
	second := startHelper(t, env)
	require.Equal(t, "DUPLICATE "+order, second.line(t))
	second.stop(t)

	// 3. The Forwarder moved the one outbox message to RabbitMQ; the notifications
	// consumer recorded one receipt, with the deterministic UUID.
	o := next(t, notified)
	require.NoError(t, o.err)
	require.False(t, o.duplicate)
	require.Equal(t, eventID, o.uuid)

	require.Equal(t, 1, credits(t, pool, wallet), "wallet credited once")
	require.Equal(t, []string{eventID}, outboxRows(t, pool, ob), "one outbox message")
	require.Equal(t, []string{eventID}, r.uuids(t), "one receipt")
}

// TestHelperProcess is the billing process of the crash test; it does nothing unless
// OUTBOX_HELPER=billing.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "billing" {
		return
	}
	if err := runBilling(); err != nil {
		fmt.Fprintln(os.Stderr, "billing:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runBilling consumes OrderPaid from Kafka until SIGTERM: behind the inbox, it credits the
// wallet and emits CashbackCredited through the outbox. It prints "COMMITTED <uuid>" after
// each commit and "DUPLICATE <uuid>" for each skipped duplicate; with
// OUTBOX_CRASH_AFTER_COMMIT set it then hangs before the ack, waiting to be killed.
func runBilling() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("INBOX_POSTGRES_DSN"))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: os.Getenv("OUTBOX_INBOX_TABLE")})
	if err != nil {
		return err
	}
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	if err != nil {
		return err
	}
	ob, err := outbox.New(outbox.Config{ForwarderTopic: os.Getenv("OUTBOX_FORWARDER_TOPIC")})
	if err != nil {
		return err
	}
	sub, err := kafkaSubscriber(strings.Split(os.Getenv("KAFKA_BROKERS"), ","), os.Getenv("OUTBOX_GROUP"))
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	crash := os.Getenv("OUTBOX_CRASH_AFTER_COMMIT") != ""
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			switch {
			case err != nil:
				fmt.Println("FAILED", msg.UUID, err)
			case msg.Metadata.Get(inbox.MetadataDuplicate) == "true":
				fmt.Println("DUPLICATE", msg.UUID)
			default:
				fmt.Println("COMMITTED", msg.UUID)
				if crash {
					select {} // committed, not acked: wait for SIGKILL
				}
			}
			return produced, err
		}
	}, ib.Middleware)
	router.AddConsumerHandler("billing", os.Getenv("OUTBOX_ORDERS_TOPIC"), sub,
		billingHandler(ob, os.Getenv("OUTBOX_WALLET_TABLE"), os.Getenv("OUTBOX_CASHBACK_QUEUE")))
	return router.Run(ctx)
}

// billingHandler credits the wallet and emits CashbackCredited to dest, both through the
// inbox transaction.
func billingHandler(ob *outbox.Outbox, wallet, dest string) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		var paid orderPaid
		if err := json.Unmarshal(msg.Payload, &paid); err != nil {
			return err
		}
		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
		if !ok {
			return fmt.Errorf("no inbox transaction")
		}
		if _, err := tx.Exec(msg.Context(), `INSERT INTO `+pgx.Identifier{wallet}.Sanitize()+` (order_id, cents) VALUES ($1, $2)`,
			paid.OrderID, paid.CashbackCents); err != nil {
			return err
		}
		payload, err := json.Marshal(cashbackCredited{OrderID: paid.OrderID, Cents: paid.CashbackCents})
		if err != nil {
			return err
		}
		event := message.NewMessage(outbox.MessageID("billing", msg.UUID, "CashbackCredited"), payload)
		return ob.Publish(msg.Context(), dest, event)
	}
}

// newWallet creates the table of wallet credits, one row per credit.
func newWallet(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	table := sqltest.Name("wallet")
	_, err := pool.Exec(context.Background(), `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (order_id text NOT NULL, cents bigint NOT NULL)`)
	require.NoError(t, err)
	dropLater(t, pool, table)
	return table
}

func credits(t testing.TB, pool *pgxpool.Pool, wallet string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{wallet}.Sanitize()).Scan(&n))
	return n
}

// helper is a running billing child process.
type helper struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *syncBuffer
	done   chan error
}

// startHelper starts the billing process with env added to this process's environment.
func startHelper(t *testing.T, env []string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	h := &helper{cmd: cmd, lines: make(chan string, 16), stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = h.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "COMMITTED ") || strings.HasPrefix(line, "DUPLICATE ") || strings.HasPrefix(line, "FAILED ") {
				h.lines <- line
			}
		}
		h.done <- cmd.Wait()
		close(h.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // our own child, by pid; a no-op once it exited
	})
	return h
}

// line returns the next outcome line the process printed.
func (h *helper) line(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			t.Fatalf("billing process exited: %v\nstderr:\n%s", <-h.done, h.stderr.String())
		}
		return line
	case <-time.After(30 * time.Second):
		t.Fatalf("billing process printed nothing in 30s; stderr:\n%s", h.stderr.String())
	}
	return ""
}

// kill sends SIGKILL and waits for the process to be gone.
func (h *helper) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, h.cmd.Process.Signal(syscall.SIGKILL))
	h.wait(t)
}

// stop sends SIGTERM and waits for a clean exit.
func (h *helper) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, h.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, h.wait(t), "stderr:\n%s", h.stderr.String())
}

func (h *helper) wait(t *testing.T) error {
	t.Helper()
	for range h.lines { // drain, so the reader reaches Wait
	}
	select {
	case err := <-h.done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("billing process did not exit in 20s")
	}
	return nil
}

// syncBuffer is a bytes.Buffer safe for the process's writer and the test's reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
