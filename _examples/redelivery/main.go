// Command redelivery replays, against a real PostgreSQL and Watermill's GoChannel, what
// happens to one cashback event when it is delivered more than once: the wallet is
// credited once.
//
//	go run ./_examples/redelivery
//
// It uses INBOX_POSTGRES_DSN, by default postgres://postgres@127.0.0.1:5432/test.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
)

type orderPaid struct {
	OrderID       string `json:"order_id"`
	CashbackCents int64  `json:"cashback_cents"`
}

// outcome is what one delivery came to, reported by an outer middleware.
type outcome struct {
	handler   string
	duplicate bool
	err       error
	wallet    int64 // cents, read after the inbox committed or rolled back, before the ack
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dsn := os.Getenv("INBOX_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := resetTables(ctx, pool); err != nil {
		return err
	}

	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: "example_inbox"})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return err
	}
	ib, err := inbox.New(inbox.Config{Store: store}) // consumer = the handler's name
	if err != nil {
		return err
	}

	var providerDown atomic.Bool
	cashback := func(msg *message.Message) error {
		var event orderPaid
		if err := json.Unmarshal(msg.Payload, &event); err != nil {
			return err
		}
		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
		if _, err := tx.Exec(msg.Context(), `UPDATE example_wallets SET cents = cents + $1 WHERE id = 'alice'`, event.CashbackCents); err != nil {
			return err
		}
		if providerDown.CompareAndSwap(true, false) { // fails once: the redelivery succeeds
			return errors.New("cashback provider timed out")
		}
		return nil
	}
	receipts := func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
		_, err := tx.Exec(msg.Context(), `INSERT INTO example_receipts (order_uuid) VALUES ($1)`, msg.UUID)
		return err
	}

	// Two instances of the cashback consumer, each its own router as it would be its own
	// process (a rebalance moves the partition from one to the other), and a receipts
	// consumer, all with the inbox middleware.
	outcomes := make(chan outcome, 16)
	logger := watermill.NopLogger{}
	instanceA := gochannel.NewGoChannel(gochannel.Config{}, logger)
	instanceB := gochannel.NewGoChannel(gochannel.Config{}, logger)
	receiptsIn := gochannel.NewGoChannel(gochannel.Config{}, logger)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var routers []*message.Router
	for _, handlers := range []map[string]message.Subscriber{
		{"cashback": instanceA, "receipts": receiptsIn},
		{"cashback": instanceB},
	} {
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			return err
		}
		router.AddMiddleware(report(outcomes, pool), ib.Middleware)
		for name, sub := range handlers {
			h := map[string]message.NoPublishHandlerFunc{"cashback": cashback, "receipts": receipts}[name]
			router.AddConsumerHandler(name, "orders", sub, h)
		}
		go func() { _ = router.Run(runCtx) }()
		<-router.Running()
		routers = append(routers, router)
	}

	first := newEvent("order-1", 190)
	second := newEvent("order-2", 190)
	steps := []struct {
		say     string
		publish func() error
		want    int64 // the wallet after the step, in cents
	}{
		{"OrderPaid order-1 arrives", func() error { return instanceA.Publish("orders", first.Copy()) }, 190},
		{"consumer died before committing the offset: order-1 delivered again", func() error { return instanceA.Publish("orders", first.Copy()) }, 190},
		{"rebalance gives the partition to another instance: order-1 delivered again", func() error { return instanceB.Publish("orders", first.Copy()) }, 190},
		{"OrderPaid order-2, the provider times out", func() error { providerDown.Store(true); return instanceA.Publish("orders", second.Copy()) }, 190},
		{"order-2 redelivered", nil, 380}, // GoChannel redelivers the nacked message
		{"another consumer (receipts) gets order-1", func() error { return receiptsIn.Publish("orders", first.Copy()) }, 380},
	}
	for i, step := range steps {
		if step.publish != nil {
			if err := step.publish(); err != nil {
				return err
			}
		}
		select {
		case o := <-outcomes:
			fmt.Printf("%d. %-75s → %s, wallet %s\n", i+1, step.say, describe(o), cents(o.wallet))
			if o.wallet != step.want {
				return fmt.Errorf("step %d: the wallet should hold %s", i+1, cents(step.want))
			}
		case <-time.After(10 * time.Second):
			return fmt.Errorf("step %d: no outcome", i+1)
		}
	}
	for _, router := range routers {
		if err := router.Close(); err != nil {
			return err
		}
	}
	return nil
}

func newEvent(uuid string, cashbackCents int64) *message.Message {
	payload, _ := json.Marshal(orderPaid{OrderID: uuid, CashbackCents: cashbackCents})
	return message.NewMessage(uuid, payload)
}

// report is an outer middleware that tells the example what the inbox did, and the
// wallet's balance right after (before the router acks or nacks, so before any
// redelivery).
func report(outcomes chan<- outcome, pool *pgxpool.Pool) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			wallet, walletErr := walletCents(context.Background(), pool)
			if walletErr != nil {
				log.Fatal(walletErr)
			}
			outcomes <- outcome{
				handler:   message.HandlerNameFromCtx(msg.Context()),
				duplicate: msg.Metadata.Get(inbox.MetadataDuplicate) == "true",
				err:       err,
				wallet:    wallet,
			}
			return produced, err
		}
	}
}

func describe(o outcome) string {
	switch {
	case o.err != nil:
		return fmt.Sprintf("failed (%v), rolled back", o.err)
	case o.duplicate:
		return "duplicate, skipped"
	case o.handler == "receipts":
		return "receipt sent"
	}
	return "credited 1.90"
}

func cents(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

func walletCents(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var c int64
	err := pool.QueryRow(ctx, `SELECT cents FROM example_wallets WHERE id = 'alice'`).Scan(&c)
	return c, err
}

func resetTables(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `
		DROP TABLE IF EXISTS example_inbox, example_inbox_attempts, example_inbox_offsets, example_wallets, example_receipts;
		CREATE TABLE example_wallets (id text PRIMARY KEY, cents bigint NOT NULL);
		INSERT INTO example_wallets VALUES ('alice', 0);
		CREATE TABLE example_receipts (order_uuid text NOT NULL)`)
	return err
}
