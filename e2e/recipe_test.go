package e2e_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// addRecipe adds the README's middleware chain ("Middleware ordering") to router, as
// written there between the markers (TestREADMEQuotesTheRecipe checks it).
// handlerTimeout is each attempt's deadline (10 s in the README).
func addRecipe(router *message.Router, ib *inbox.Inbox, poisonPublisher message.Publisher, poisonTopic string, handlerTimeout time.Duration) error {
	// README: begin
	poison, err := middleware.PoisonQueueWithFilter(poisonPublisher, poisonTopic, inbox.Permanent)
	if err != nil {
		return err
	}
	router.AddMiddleware(
		poison, // outermost: poisons a permanent failure once, after its rollback
		middleware.Retry{
			MaxRetries:          3,
			InitialInterval:     100 * time.Millisecond,
			Multiplier:          2,
			ShouldRetry:         inbox.ShouldRetry, // transient failures only
			ResetContextOnRetry: true,              // each retry starts from the message's own context
		}.Middleware,
		middleware.Recoverer, // a panic: rolled back by the inbox (a crash, for MaxAttempts), then an error
		ib.Middleware,
		middleware.CorrelationID,           // inside: the stored (replayed) output carries it too
		middleware.Timeout(handlerTimeout), // each attempt's deadline, e.g. 10*time.Second
	)
	// README: end
	return nil
}

// The README quotes addRecipe's chain as it is here (one tab less).
func TestREADMEQuotesTheRecipe(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("recipe_test.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	body := string(src)
	start := strings.Index(body, "\t// README: begin\n")
	end := strings.Index(body, "\t// README: end\n")
	require.True(t, start >= 0 && end > start)
	var quoted []string
	for _, line := range strings.Split(strings.TrimSuffix(body[start+len("\t// README: begin\n"):end], "\n"), "\n") {
		quoted = append(quoted, strings.TrimPrefix(line, "\t"))
	}
	require.True(t, strings.Contains(string(readme), strings.Join(quoted, "\n")), "paste addRecipe's chain from e2e/recipe_test.go into the README's Middleware ordering section")
}

// errProvider is a transient failure of the handler's own: retried.
var errProvider = errors.New("cashback provider timed out")

// recipeWorld is a router running the recipe around a handler whose behaviour each
// message's payload picks, on a real PostgreSQL.
type recipeWorld struct {
	s        setup
	outcomes *brokertest.Outcomes

	mu       sync.Mutex
	attempts map[string]int // handler runs per payload
	keyCalls map[string]int // key derivations per payload (a retry derives it again)
}

func (w *recipeWorld) count(m map[string]int, payload string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	m[payload]++
	return m[payload]
}

func (w *recipeWorld) get(m map[string]int, payload string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return m[payload]
}

// handler credits the ledger and returns a receipt, failing as the payload says:
// "flaky" fails twice, "slow" blocks its first attempt until the Timeout, "late" ignores
// the Timeout and returns nil after it, "huge" produces more than MaxOutputBytes,
// "panic" panics every time, "invalid" fails with an error the handler marks permanent.
func (w *recipeWorld) handler(msg *message.Message) ([]*message.Message, error) {
	payload := string(msg.Payload)
	n := w.count(w.attempts, payload)
	ctx := msg.Context()
	if err := w.s.ledger.Apply(ctx, "recipe", msg.UUID); err != nil {
		return nil, err
	}
	switch {
	case payload == "flaky" && n <= 2:
		return nil, errProvider
	case payload == "slow" && n == 1:
		<-ctx.Done() // the Timeout inside the inbox ends this attempt
		return nil, ctx.Err()
	case payload == "late":
		<-ctx.Done() // the handler ignores its deadline, and returns nil after it
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("receipt"))}, nil
	case payload == "huge":
		return []*message.Message{message.NewMessage(watermill.NewUUID(), make([]byte, 4096))}, nil
	case payload == "panic":
		panic("handler bug")
	case payload == "invalid":
		return nil, inbox.MarkPermanent(errors.New("unknown currency XYZ")) // no redelivery cures it
	}
	return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("receipt of "+payload))}, nil
}

// newRecipeWorld starts a router with the recipe on sub's topic, publishing receipts and
// poisoned messages with pub.
func newRecipeWorld(t *testing.T, sub message.Subscriber, pub message.Publisher, topic, receipts, poisonTopic string, handlerTimeout time.Duration) *recipeWorld {
	t.Helper()
	w := &recipeWorld{s: newSetup(t), outcomes: &brokertest.Outcomes{}, attempts: map[string]int{}, keyCalls: map[string]int{}}
	ib, err := inbox.New(inbox.Config{
		Store:    w.s.store,
		Consumer: "billing",
		Key: func(msg *message.Message) (string, error) {
			w.count(w.keyCalls, string(msg.Payload))
			return inbox.KeyFromUUID(msg)
		},
		MaxAttempts:    2,
		MaxOutputBytes: 1024,
		Observer:       w.outcomes,
	})
	require.NoError(t, err)
	runRouter(t, func(r *message.Router) {
		require.NoError(t, addRecipe(r, ib, pub, poisonTopic, handlerTimeout))
		r.AddHandler("billing", topic, sub, receipts, pub, w.handler)
	})
	return w
}

// recipeCase is one message through the recipe, and what must become of it.
type recipeCase struct {
	payload  string
	noUUID   bool
	poisoned bool // published to the poison queue (and acked), never processed
	applied  int  // ledger rows committed for it
	minRuns  int  // handler runs at least
	maxRuns  int  // and at most (0: no bound)
}

// The findings of issue 23, through the recipe: ErrNoKey poisoned at once (the key is
// derived once, the handler never runs); a permanent failure (output too large, or an
// error the handler marks permanent) not retried; a transient one retried until it succeeds; an attempt that overran the
// Timeout retried with a fresh deadline (Timeout inside the inbox, ResetContextOnRetry);
// a handler that ignores its deadline and returns nil afterwards committed; a handler
// that panics every time poisoned once MaxAttempts crashes are counted.
var recipeCases = []recipeCase{
	{payload: "ok", applied: 1, minRuns: 1},
	{payload: "no-key", noUUID: true, poisoned: true, maxRuns: -1},
	{payload: "huge", poisoned: true, minRuns: 1, maxRuns: 1},
	{payload: "flaky", applied: 1, minRuns: 3},
	{payload: "slow", applied: 1, minRuns: 2},
	{payload: "late", applied: 1, minRuns: 1},
	{payload: "panic", poisoned: true, minRuns: 2, maxRuns: 2},
	{payload: "invalid", poisoned: true, minRuns: 1, maxRuns: 1},
}

// checkRecipe publishes every case, waits until each is processed or poisoned, and
// checks what became of it; then it publishes "ok" again, which must be a duplicate
// whose stored receipt is replayed with the correlation id.
func checkRecipe(t *testing.T, w *recipeWorld, pub message.Publisher, topic string, receipts, poisoned <-chan *message.Message) {
	t.Helper()
	uuids := map[string]string{}
	for _, c := range recipeCases {
		uuid := watermill.NewUUID()
		if c.noUUID {
			uuid = ""
		}
		uuids[c.payload] = uuid
		msg := message.NewMessage(uuid, []byte(c.payload))
		middleware.SetCorrelationID("corr-"+c.payload, msg)
		require.NoError(t, pub.Publish(topic, msg))
	}

	wantPoisoned, wantReceipts := 0, 0
	for _, c := range recipeCases {
		if c.poisoned {
			wantPoisoned++
		} else {
			wantReceipts++
		}
	}
	gotPoisoned := map[string]*message.Message{}
	gotReceipts := map[string]*message.Message{}
	deadline := time.After(2 * wait)
	for len(gotPoisoned) < wantPoisoned || len(gotReceipts) < wantReceipts {
		select {
		case m := <-poisoned:
			m.Ack()
			gotPoisoned[string(m.Payload)] = m
		case m := <-receipts:
			m.Ack()
			gotReceipts[m.Metadata.Get(middleware.CorrelationIDMetadataKey)] = m
		case <-deadline:
			t.Fatalf("after %v: poisoned %d of %d, receipts %d of %d", 2*wait, len(gotPoisoned), wantPoisoned, len(gotReceipts), wantReceipts)
		}
	}

	for _, c := range recipeCases {
		t.Run(c.payload, func(t *testing.T) {
			runs := w.get(w.attempts, c.payload)
			if c.poisoned {
				m := gotPoisoned[c.payload]
				require.NotNil(t, m, "poisoned")
				require.NotEmpty(t, m.Metadata.Get(middleware.ReasonForPoisonedKey))
			} else {
				require.Contains(t, gotReceipts, "corr-"+c.payload, "its receipt, with the consumed message's correlation id")
			}
			require.Equal(t, c.applied, w.s.ledger.Applied(t, uuids[c.payload]), "committed ledger rows")
			if c.maxRuns == -1 { // never reached the handler; its key derived once: not retried
				require.Zero(t, runs)
				require.Equal(t, 1, w.get(w.keyCalls, c.payload))
				require.Contains(t, gotPoisoned[c.payload].Metadata.Get(middleware.ReasonForPoisonedKey), inbox.ErrNoKey.Error())
				return
			}
			require.GreaterOrEqual(t, runs, c.minRuns)
			if c.maxRuns > 0 {
				require.LessOrEqual(t, runs, c.maxRuns)
			}
		})
	}
	require.Contains(t, gotPoisoned["huge"].Metadata.Get(middleware.ReasonForPoisonedKey), inbox.ErrOutputTooLarge.Error())
	require.Contains(t, gotPoisoned["panic"].Metadata.Get(middleware.ReasonForPoisonedKey), inbox.ErrTooManyAttempts.Error())

	// The same "ok" again: a duplicate, its stored receipt replayed with the same UUID
	// and the correlation id it was stored with.
	again := message.NewMessage(uuids["ok"], []byte("ok"))
	middleware.SetCorrelationID("corr-ok", again)
	require.NoError(t, pub.Publish(topic, again))
	select {
	case m := <-receipts:
		m.Ack()
		require.Equal(t, gotReceipts["corr-ok"].UUID, m.UUID, "replayed")
		require.Equal(t, "corr-ok", middleware.MessageCorrelationID(m))
	case <-time.After(wait):
		t.Fatal("the duplicate's stored receipt was not replayed")
	}
	require.Equal(t, 1, w.s.ledger.Applied(t, uuids["ok"]))
	require.Equal(t, 1, w.outcomes.Count(inbox.OutcomeReplayed))
}

// The recipe on Watermill's GoChannel.
func TestRecipeGoChannel(t *testing.T) {
	t.Parallel()
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubSub.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	receipts, err := pubSub.Subscribe(ctx, "receipts")
	require.NoError(t, err)
	poisoned, err := pubSub.Subscribe(ctx, "orders.poison")
	require.NoError(t, err)

	w := newRecipeWorld(t, pubSub, pubSub, "orders", "receipts", "orders.poison", time.Second)
	checkRecipe(t, w, pubSub, "orders", receipts, poisoned)
}

// The wrong order, for contrast: Timeout outside Retry hands every retry a context that
// has already ended, so a message whose first attempt overran is never processed.
func TestTimeoutOutsideRetryFailsEveryRetry(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ib, err := inbox.New(inbox.Config{Store: s.store, Consumer: "billing"})
	require.NoError(t, err)
	runs := 0
	h := middleware.Timeout(200 * time.Millisecond)(middleware.Retry{MaxRetries: 3, InitialInterval: 10 * time.Millisecond}.Middleware(
		ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			runs++
			if runs == 1 {
				<-msg.Context().Done()
				return nil, msg.Context().Err()
			}
			return nil, s.ledger.Apply(msg.Context(), "recipe", msg.UUID)
		})))
	msg := message.NewMessage(watermill.NewUUID(), []byte("slow"))
	_, err = h(msg)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "context deadline exceeded") || errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.Zero(t, s.ledger.Applied(t, msg.UUID), "no retry could commit")
}
