// Command webhook runs a webhook sender and a receiver against a real PostgreSQL: the
// sender signs each delivery in the Standard Webhooks way (webhook-id, webhook-timestamp,
// webhook-signature) and retries it when the answer does not come or is a 5xx; the
// receiver checks the signature, then applies each event once behind inboxhttp, keyed by
// webhook-id. It prints what happened to each delivery and exits non-zero if an event was
// applied other than once.
//
//	go run ./_examples/webhook
//
// It uses INBOX_POSTGRES_DSN, by default postgres://postgres@127.0.0.1:5432/test.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
	"github.com/watermill-inbox/inbox/internal/exampleenv"
)

var secret = []byte("whsec-example-secret")

type event struct {
	Type   string `json:"type"`
	Amount int64  `json:"amount"`
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dsn := exampleenv.PostgresDSN()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS example_webhook_inbox, example_webhook_inbox_attempts, example_webhook_inbox_offsets, example_webhook_applied;
		CREATE TABLE example_webhook_applied (webhook_id text NOT NULL, amount bigint NOT NULL)`); err != nil {
		return err
	}
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: "example_webhook_inbox"})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return err
	}
	ib, err := inbox.New(inbox.Config{Store: store})
	if err != nil {
		return err
	}
	idem, err := inboxhttp.New(inboxhttp.Config{
		Inbox:    ib,
		Consumer: "payments-webhooks",
		Key:      inboxhttp.WebhookID,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}

	// The receiver: the signature check outside, so that only genuine deliveries claim
	// keys; the event applied in the inbox transaction.
	var slowOnce, failOnce atomic.Bool
	slowOnce.Store(true)
	failOnce.Store(true)
	apply := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, "not an event", http.StatusBadRequest)
			return
		}
		tx, _ := inbox.TxFromContext[pgx.Tx](r.Context())
		if _, err := tx.Exec(r.Context(), `INSERT INTO example_webhook_applied VALUES ($1, $2)`, r.Header.Get("webhook-id"), ev.Amount); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch {
		case ev.Type == "slow" && slowOnce.CompareAndSwap(true, false):
			time.Sleep(700 * time.Millisecond) // longer than the sender waits: it gives up and retries
		case ev.Type == "flaky" && failOnce.CompareAndSwap(true, false):
			http.Error(w, "ledger service unavailable", http.StatusServiceUnavailable) // rolled back
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"applied":%q,"amount":%d}`, r.Header.Get("webhook-id"), ev.Amount)
	})
	receiver := httptest.NewServer(verify(idem.Middleware(apply)))
	defer receiver.Close()

	sender := &http.Client{Timeout: 300 * time.Millisecond}
	deliveries := []struct {
		say    string
		id     string
		ev     event
		forged bool
	}{
		{"msg_1 arrives", "msg_1", event{"payment.succeeded", 500}, false},
		{"msg_2: the receiver is slower than the sender waits", "msg_2", event{"slow", 250}, false},
		{"msg_3: the receiver's ledger fails once", "msg_3", event{"flaky", 100}, false},
		{"msg_1 sent again (the sender lost its record)", "msg_1", event{"payment.succeeded", 500}, false},
		{"a forged msg_4 (bad signature)", "msg_4", event{"payment.succeeded", 1_000_000}, true},
	}
	for i, d := range deliveries {
		fmt.Printf("%d. %s\n", i+1, d.say)
		if err := deliver(sender, receiver.URL, d.id, d.ev, d.forged); err != nil {
			return err
		}
	}

	rows, err := pool.Query(ctx, `SELECT webhook_id, count(*), sum(amount) FROM example_webhook_applied GROUP BY webhook_id ORDER BY webhook_id`)
	if err != nil {
		return err
	}
	type applied struct {
		id     string
		n      int
		amount int64
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (applied, error) {
		var a applied
		return a, row.Scan(&a.id, &a.n, &a.amount)
	})
	if err != nil {
		return err
	}
	want := []applied{{"msg_1", 1, 500}, {"msg_2", 1, 250}, {"msg_3", 1, 100}}
	fmt.Printf("applied: %v\n", got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("wrong result: applied %v, want each genuine event once: %v", got, want)
	}
	fmt.Println("every genuine event applied exactly once")
	return nil
}

// deliver sends one delivery and retries it, as webhook senders do, until it gets a
// 2xx or a 4xx.
func deliver(client *http.Client, url, id string, ev event, forged bool) error {
	body, _ := json.Marshal(ev)
	for attempt := 1; attempt <= 10; attempt++ {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
		if err != nil {
			return err
		}
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		sig := sign(id, ts, body)
		if forged {
			sig = sign(id, ts, []byte(`{"type":"something else"}`))
		}
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", ts)
		req.Header.Set("webhook-signature", "v1,"+sig)
		resp, err := client.Do(req)
		if err != nil {
			fmt.Printf("   attempt %d: no answer (%v), will retry\n", attempt, shortErr(err))
			continue
		}
		answer, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		replayed := ""
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			replayed = " (replayed: the receiver had applied it already)"
		}
		fmt.Printf("   attempt %d: %d %s%s\n", attempt, resp.StatusCode, strings.TrimSpace(string(answer)), replayed)
		if resp.StatusCode < 500 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("delivery %s: no success after 10 attempts", id)
}

func sign(id, ts string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// verify refuses a delivery whose signature is wrong, before the inbox sees its key.
func verify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		ts, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
		if err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute { // replay protection
			http.Error(w, "bad or stale timestamp", http.StatusUnauthorized)
			return
		}
		want := sign(r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), body)
		ok := false
		for _, s := range strings.Fields(r.Header.Get("webhook-signature")) {
			if v, found := strings.CutPrefix(s, "v1,"); found && hmac.Equal([]byte(v), []byte(want)) {
				ok = true
			}
		}
		if !ok {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		next.ServeHTTP(w, r)
	})
}

func shortErr(err error) string {
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timed out"
	}
	return err.Error()
}
