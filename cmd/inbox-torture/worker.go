package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/kafkakey"
)

// A worker reports to the parent on stdout, one line per event:
//
//	ready
//	ok <key> <copy>       processed and committed; the ack follows
//	dup <key> <copy>      a duplicate, skipped
//	fail <key> <copy> injected|contended|db
//	crash <key> <copy>    committed, and about to SIGKILL itself before the ack
//	skip <key> <copy>     -transport kgo: a poison record, taken by the dead-letter topic
//	waited                a duplicate's claim took 5 ms or more: it most likely waited
//	                      for the concurrent transaction that held its key

// errInjected is the failure a handler returns on purpose, after writing.
var errInjected = errors.New("injected handler failure")

// handlerDelay is how long a handler may sleep between its writes.
var handlerDelay time.Duration

func sleepUpTo(ctx context.Context) {
	if handlerDelay <= 0 {
		return
	}
	select {
	case <-time.After(rand.N(handlerDelay)):
	case <-ctx.Done():
	}
}

// out serialises the report lines (a single write each, unbuffered, so a line written
// before a SIGKILL reaches the parent).
var outMu sync.Mutex

func report(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// messageIndex returns i of the key "m<i>".
func messageIndex(key string) (int, error) {
	i, err := strconv.Atoi(strings.TrimPrefix(key, "m"))
	if err != nil || !strings.HasPrefix(key, "m") {
		return 0, fmt.Errorf("unexpected message key %q", key)
	}
	return i, nil
}

func runWorker(ctx context.Context, o options) error {
	handlerDelay = o.handlerDelay
	db, err := openDatabase(ctx, o, true)
	if err != nil {
		return err
	}
	defer db.close()
	cfg := inbox.Config{Store: db.store(), Consumer: consumer, OnDuplicate: inbox.Skip, Observer: waitObserver{}}
	if o.mode == "offsets" {
		cfg.Position = kafkakey.Partition
	}
	ib, err := inbox.New(cfg)
	if err != nil {
		return err
	}
	w := &worker{o: o, db: db, ib: ib}
	switch o.transport {
	case "direct":
		return w.direct(ctx)
	case "kgo":
		return w.kgo(ctx)
	default:
		return w.broker(ctx)
	}
}

// waitObserver reports duplicates whose claim was slow, which is how a claim that waited
// on a concurrent delivery's transaction shows from outside (a figure, not a check).
type waitObserver struct{}

func (waitObserver) Observe(_ context.Context, o inbox.Observation) {
	if o.Outcome == inbox.OutcomeDuplicate && o.ClaimWait >= 5*time.Millisecond {
		report("waited")
	}
}

type worker struct {
	o  options
	db database
	ib *inbox.Inbox
}

// handle is the handler: it credits message key, then fails with probability fail-rate.
func (w *worker) handle(ctx context.Context, key string) error {
	i, err := messageIndex(key)
	if err != nil {
		return err
	}
	if err := w.db.credit(ctx, key, i%w.o.accounts, i+1); err != nil {
		return err
	}
	if rand.Float64() < w.o.failRate {
		return errInjected
	}
	return nil
}

// done reports how one delivery ended, and crashes with probability crash-rate after a
// commit: the message is then committed but never acked.
func (w *worker) done(key, copy string, duplicate bool, err error) {
	switch {
	case errors.Is(err, errInjected):
		report("fail %s %s injected", key, copy)
	case errors.Is(err, inbox.ErrContended):
		report("fail %s %s contended", key, copy)
	case err != nil:
		fmt.Fprintf(os.Stderr, "worker %d: %s copy %s: %v\n", os.Getpid(), key, copy, err)
		report("fail %s %s db", key, copy)
	case duplicate:
		report("dup %s %s", key, copy)
	case rand.Float64() < w.o.crashRate:
		report("crash %s %s", key, copy)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	default:
		report("ok %s %s", key, copy)
	}
}

// direct reads "<key> <copy>" lines on stdin and handles each with ib.Process, up to
// -concurrency at once, until stdin closes.
func (w *worker) direct(ctx context.Context) error {
	lines := make(chan string)
	var wg sync.WaitGroup
	for range w.o.concurrency {
		wg.Go(func() {
			for line := range lines {
				key, copy, _ := strings.Cut(line, " ")
				ctx := ctx
				if i, err := messageIndex(key); err == nil && w.o.tenants > 0 {
					ctx = inbox.ContextWithTenant(ctx, tenantOf(w.o, i))
				}
				dup, err := w.ib.Process(ctx, consumer, key, func(ctx context.Context) error {
					return w.handle(ctx, key)
				})
				w.done(key, copy, dup, err)
			}
		})
	}
	report("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		lines <- sc.Text()
	}
	close(lines)
	wg.Wait()
	return sc.Err()
}

// copyMetadata names the copy of a message published through a broker.
const copyMetadata = "torture_copy"

// broker consumes from Kafka or RabbitMQ with ib.Middleware in a Watermill router, until
// killed or stdin closes.
func (w *worker) broker(ctx context.Context) error {
	sub, topic, err := subscriber(w.o)
	if err != nil {
		return err
	}
	defer sub.Close()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	reporter := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			w.done(msg.UUID, msg.Metadata.Get(copyMetadata), msg.Metadata.Get(inbox.MetadataDuplicate) == "true", err)
			return out, err
		}
	}
	router.AddMiddleware(reporter, w.ib.Middleware)
	router.AddConsumerHandler(consumer, topic, sub, func(msg *message.Message) error {
		return w.handle(msg.Context(), msg.UUID)
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the parent closes stdin to stop the worker
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		cancel()
	}()
	go func() {
		<-router.Running()
		report("ready")
	}()
	return router.Run(ctx)
}
