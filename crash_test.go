package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The crash helper runs in a child process (the test binary re-executed): it handles one
// message whose handler writes through the inbox transaction and then SIGKILLs its own
// process, as an OOM kill or a crash outside any recover would.
const (
	crashHelperEnv = "INBOX_CRASH_HELPER"
	crashTableEnv  = "INBOX_CRASH_TABLE"
	crashLedgerEnv = "INBOX_CRASH_LEDGER"
	crashUUIDEnv   = "INBOX_CRASH_UUID"
	crashMaxEnv    = "INBOX_CRASH_MAX_ATTEMPTS"
	crashConsumer  = "crashy"
	crashInHandler = "crash helper: in the handler, killing myself"
)

func TestHelperProcess(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "1" {
		return // not the child: nothing to do
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, postgresDSN())
	require.NoError(t, err)
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: os.Getenv(crashTableEnv)})
	require.NoError(t, err)
	maxAttempts, err := strconv.Atoi(os.Getenv(crashMaxEnv))
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: crashConsumer, MaxAttempts: maxAttempts})
	require.NoError(t, err)
	led := pgLedger{pool: pool, table: os.Getenv(crashLedgerEnv)}

	h := ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
		if err := led.credit(m.Context(), 100); err != nil {
			return nil, err
		}
		fmt.Fprintln(os.Stdout, crashInHandler)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	})
	_, err = h(message.NewMessage(os.Getenv(crashUUIDEnv), []byte("payload")))
	t.Fatalf("crash helper: the handler returned (%v) instead of killing the process", err)
}

// crashOnce runs the crash helper in a child process and checks it died of SIGKILL inside
// the handler.
func crashOnce(t *testing.T, table, ledgerTable, uuid string, maxAttempts int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		crashHelperEnv+"=1",
		crashTableEnv+"="+table,
		crashLedgerEnv+"="+ledgerTable,
		crashUUIDEnv+"="+uuid,
		crashMaxEnv+"="+strconv.Itoa(maxAttempts),
	)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child should have been killed; output:\n%s", out)
	status, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, status.Signaled(), "the child exited instead of being killed; output:\n%s", out)
	require.Equal(t, syscall.SIGKILL, status.Signal())
	require.Contains(t, string(out), crashInHandler, "the child died before its handler ran")
}

func TestCrashPoison_KilledHandlerIsPoisonedAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	pool := pgPool(t)
	table := tableName("crash")
	store := newPgxStore(t, pool, inbox.PostgresConfig{Table: table})
	led := newPgLedger(t, pool)
	const uuid = "msg-that-kills"

	for range maxAttempts {
		crashOnce(t, table, led.table, uuid, maxAttempts)
	}
	total, _ := led.balance(t)
	require.Zero(t, total, "each crashed attempt rolled back its writes")

	var calls atomic.Int32
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: crashConsumer, MaxAttempts: maxAttempts})
	require.NoError(t, err)
	handler := ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return nil, led.credit(m.Context(), 100)
	})

	_, err = handler(message.NewMessage(uuid, []byte("payload")))
	require.ErrorIs(t, err, inbox.ErrTooManyAttempts)
	require.ErrorContains(t, err, "3 attempts started and never finished")

	// Watermill's PoisonQueue diverts it, so the router acks it and moves on.
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	poisoned, err := pubSub.Subscribe(context.Background(), "poison")
	require.NoError(t, err)
	poisonQueue, err := middleware.PoisonQueueWithFilter(pubSub, "poison", func(err error) bool {
		return errors.Is(err, inbox.ErrTooManyAttempts)
	})
	require.NoError(t, err)
	_, err = poisonQueue(handler)(message.NewMessage(uuid, []byte("payload")))
	require.NoError(t, err, "the poison queue took the message")
	select {
	case m := <-poisoned:
		require.Equal(t, uuid, m.UUID)
		require.Contains(t, m.Metadata.Get(middleware.ReasonForPoisonedKey), inbox.ErrTooManyAttempts.Error())
		m.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("nothing reached the poison queue")
	}
	require.Zero(t, calls.Load(), "a poisoned message never reaches its handler again")
	total, _ = led.balance(t)
	require.Zero(t, total)

	// An operator who fixed the handler forgets the key: the attempts go with it.
	_, err = store.Forget(context.Background(), crashConsumer, uuid)
	require.NoError(t, err)
	_, err = handler(message.NewMessage(uuid, []byte("payload")))
	require.NoError(t, err)
	require.Equal(t, int32(1), calls.Load())
}

func TestCrashPoison_FailingHandlerIsNotPoisoned(t *testing.T) {
	t.Parallel()
	const maxAttempts = 2
	pool := pgPool(t)
	led := newPgLedger(t, pool)
	ib, err := inbox.New(inbox.Config{Store: newPgxStore(t, pool, inbox.PostgresConfig{}), Consumer: "flaky", MaxAttempts: maxAttempts})
	require.NoError(t, err)

	var calls atomic.Int32
	handler := ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
		if calls.Add(1) <= 5 {
			return nil, errors.New("downstream unavailable")
		}
		return nil, led.credit(m.Context(), 7)
	})
	for i := range 5 {
		_, err := handler(message.NewMessage("msg-flaky", []byte("p")))
		require.ErrorContains(t, err, "downstream unavailable", "attempt %d", i+1)
		require.NotErrorIs(t, err, inbox.ErrTooManyAttempts, "attempt %d", i+1)
	}
	_, err = handler(message.NewMessage("msg-flaky", []byte("p")))
	require.NoError(t, err, "clean failures end their attempts: the sixth try runs")
	total, credits := led.balance(t)
	require.Equal(t, 7, total)
	require.Equal(t, 1, credits)
}

// BenchmarkMaxAttempts measures what attempt counting costs a first delivery: the same
// first deliveries through an inbox without and with MaxAttempts, interleaved, reported as
// ns per message for each and their ratio, on PostgreSQL (pgx) and MariaDB.
func BenchmarkMaxAttempts(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) (without, with inbox.Store)
	}{
		{name: "pgx", open: func(b *testing.B) (inbox.Store, inbox.Store) {
			pool := pgPool(b)
			return newPgxStore(b, pool, inbox.PostgresConfig{}), newPgxStore(b, pool, inbox.PostgresConfig{})
		}},
		{name: "mariadb", open: func(b *testing.B) (inbox.Store, inbox.Store) {
			db := mariaDB(b)
			return newMySQLStore(b, db, inbox.MySQLConfig{}), newMySQLStore(b, db, inbox.MySQLConfig{})
		}},
	}
	for _, s := range stores {
		b.Run(s.name, func(b *testing.B) {
			storeWithout, storeWith := s.open(b)
			without, err := inbox.New(inbox.Config{Store: storeWithout})
			require.NoError(b, err)
			with, err := inbox.New(inbox.Config{Store: storeWith, MaxAttempts: 5})
			require.NoError(b, err)
			benchmarkAttempts(b, without, with)
		})
	}
}

func benchmarkAttempts(b *testing.B, without, with *inbox.Inbox) {
	noop := func(context.Context) error { return nil }
	ctx := context.Background()
	var tWithout, tWith time.Duration
	for i := 0; b.Loop(); i++ {
		key := "key-" + strconv.Itoa(i)
		for _, run := range []struct {
			ib    *inbox.Inbox
			spent *time.Duration
		}{{without, &tWithout}, {with, &tWith}} {
			start := time.Now()
			dup, err := run.ib.Process(ctx, "bench", key, noop)
			*run.spent += time.Since(start)
			if err != nil || dup {
				b.Fatalf("key %s: duplicate=%v err=%v", key, dup, err)
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(tWithout.Nanoseconds())/n, "ns/without")
	b.ReportMetric(float64(tWith.Nanoseconds())/n, "ns/with")
	if tWithout > 0 {
		b.ReportMetric(float64(tWith)/float64(tWithout), "with/without")
	}
}

// Claims the database gave up on (a lock timeout behind a concurrent delivery) are clean
// failures, not crashes: they must not make a healthy message poison.
func TestContendedClaimsAreNotCrashes(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	store := newPgxStore(t, pool, inbox.PostgresConfig{LockTimeout: 100 * time.Millisecond})
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: 2})
	require.NoError(t, err)
	ctx := context.Background()

	inHandler, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error {
			close(inHandler)
			<-release
			return errors.New("first delivery fails cleanly")
		})
		first <- err
	}()
	<-inHandler
	for range 2 {
		_, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error {
			t.Fatal("the key is held: the handler must not run")
			return nil
		})
		require.ErrorIs(t, err, inbox.ErrContended)
	}
	close(release)
	require.Error(t, <-first)

	ran := false
	dup, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err, "no attempt crashed: the message is not poison")
	require.False(t, dup)
	require.True(t, ran)
}
