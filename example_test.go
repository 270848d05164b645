package inbox_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log"
	"net/http"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
)

// The middleware in a router, with the recommended order of Watermill's middlewares.
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
	if err := store.CreateSchema(ctx); err != nil { // or run schema/postgres.sql
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}

	logger := watermill.NewStdLogger(false, false)
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		log.Fatal(err)
	}
	poison, err := middleware.PoisonQueue(pubSub, "orders.poison")
	if err != nil {
		log.Fatal(err)
	}
	// Outermost first: poison after the retries; each retry a fresh inbox transaction.
	router.AddMiddleware(poison, middleware.Retry{MaxRetries: 3}.Middleware, ib.Middleware, middleware.Recoverer)
	router.AddConsumerHandler("billing", "orders", pubSub, func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
		_, err := tx.Exec(msg.Context(), `UPDATE wallets SET cents = cents + 190 WHERE id = $1`, "alice")
		return err // an error rolls back the update and the key
	})
	if err := router.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Keys for messages from producers other than Watermill.
func ExampleFirstOf() {
	key := inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents, inbox.KeyFromMetadata("x-idempotency-key"))

	kafkaRecord := message.NewMessage("", []byte(`{}`)) // no _watermill_message_uuid header
	kafkaRecord.Metadata.Set("ce_id", "evt-42")
	kafkaRecord.Metadata.Set("ce_source", "/orders")
	fmt.Println(key(kafkaRecord))

	structured := message.NewMessage("", []byte(`{"specversion":"1.0","id":"evt-43","source":"/orders"}`))
	fmt.Println(key(structured))

	fmt.Println(key(message.NewMessage("0f3c-watermill-uuid", nil)))
	// Output:
	// /orders evt-42 <nil>
	// /orders evt-43 <nil>
	// 0f3c-watermill-uuid <nil>
}

func ExampleKeyFromJSON() {
	key := inbox.KeyFromJSON("data.transaction_id")
	fmt.Println(key(message.NewMessage("", []byte(`{"data":{"transaction_id":1234}}`))))
	_, err := key(message.NewMessage("u-1", []byte(`{"data":{}}`)))
	fmt.Println(err)
	// Output:
	// 1234 <nil>
	// no inbox key: JSON field "data.transaction_id" is missing
}

// Process gives the same guarantee to an HTTP webhook handler.
func ExampleInbox_Process() {
	var ib *inbox.Inbox // from inbox.New
	http.HandleFunc("POST /webhooks/payments", func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		duplicate, err := ib.Process(r.Context(), "payments-webhook", key, func(ctx context.Context) error {
			tx, _ := inbox.TxFromContext[pgx.Tx](ctx)
			_, err := tx.Exec(ctx, `INSERT INTO payments (idempotency_key) VALUES ($1)`, key)
			return err
		})
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		case duplicate:
			w.WriteHeader(http.StatusOK) // already applied
		default:
			w.WriteHeader(http.StatusCreated)
		}
	})
}

// ProcessResult gives a retry the first answer: fn's bytes are stored with the key in
// its transaction, and a duplicate returns them without running fn.
func ExampleInbox_ProcessResult() {
	ctx := context.Background()
	var ib *inbox.Inbox // from inbox.New over a PostgresStore
	request := []byte(`{"order":"o-1","amount":250}`)
	fingerprint := sha256.Sum256(request)

	res, err := ib.ProcessResult(ctx, "refunds", "refund-o-1", fingerprint[:], func(ctx context.Context) ([]byte, error) {
		tx, _ := inbox.TxFromContext[pgx.Tx](ctx)
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO refunds (order_id, cents) VALUES ('o-1', 250) RETURNING id`).Scan(&id); err != nil {
			return nil, err // rolled back, key included: the next call runs again
		}
		return fmt.Appendf(nil, `{"refund":%d}`, id), nil
	})
	switch {
	case err != nil:
		log.Fatal(err)
	case res.Mismatch:
		fmt.Println("the key was used for a different request")
	default:
		fmt.Printf("answer %s (duplicate: %v)\n", res.Output, res.Duplicate)
	}
}
