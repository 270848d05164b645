package inboxhttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
)

// An idempotent POST route on the standard mux: the handler writes through the inbox
// transaction; a retry with the same Idempotency-Key gets the same 201.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{})
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	payments, err := inboxhttp.New(inboxhttp.Config{Inbox: ib, Consumer: "POST /payments"})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /payments", payments.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := inbox.TxFromContext[pgx.Tx](r.Context())
		if !ok {
			http.Error(w, "no inbox transaction", http.StatusInternalServerError)
			return
		}
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO payments (amount) VALUES (100) RETURNING id`).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // a 5xx: rolled back, not stored
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/payments/%d", id))
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
	})))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}

// A webhook receiver keyed by the Standard Webhooks webhook-id: each delivery is applied
// once, however often the sender retries it. The signature check goes outside, so that
// only genuine deliveries claim keys. For Stripe, use inboxhttp.JSONField("id"); for
// GitHub, inboxhttp.GitHubDelivery.
func Example_webhook() {
	var ib *inbox.Inbox                                 // from inbox.New
	var verifySignature func(http.Handler) http.Handler // your provider's check
	var apply http.Handler                              // writes through inbox.TxFromContext

	receiver, err := inboxhttp.New(inboxhttp.Config{
		Inbox:    ib,
		Consumer: "billing-webhooks",
		Key:      inboxhttp.WebhookID,
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /webhooks/billing", verifySignature(receiver.Middleware(apply)))
}

// Middleware is a func(http.Handler) http.Handler, so it composes with chi-style
// routers (r.Use) as with any other middleware chain.
func ExampleIdempotency_Middleware() {
	var payments *inboxhttp.Idempotency // from inboxhttp.New
	var handler http.Handler

	use := func(mws ...func(http.Handler) http.Handler) http.Handler { // what r.Use does
		h := handler
		for i := len(mws) - 1; i >= 0; i-- {
			h = mws[i](h)
		}
		return h
	}
	http.Handle("POST /payments", use(payments.Middleware))
}
