// Command redelivery replays, against a real database and Watermill's GoChannel, what
// happens to one cashback event when it is delivered more than once: the wallet is
// credited once.
//
//	go run ./_examples/redelivery                # SQLite, a file in a temporary directory: no server
//	go run ./_examples/redelivery -db postgres   # INBOX_POSTGRES_DSN, by default postgres://postgres@127.0.0.1:5432/test
//	go run ./_examples/redelivery -db mysql      # INBOX_MARIADB_DSN, by default root@tcp(127.0.0.1:3306)/test
//
// The handlers are the same on each: they write through the inbox's *sql.Tx.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

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
	which := flag.String("db", "sqlite", "database: sqlite (a new file, no server), postgres or mysql")
	flag.Parse()
	if err := run(context.Background(), *which); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, which string) error {
	db, err := openDatabase(ctx, which) // db.go: the store, and the example's tables
	if err != nil {
		return err
	}
	defer db.close()
	ib, err := inbox.New(inbox.Config{Store: db.store}) // consumer = the handler's name
	if err != nil {
		return err
	}

	var providerDown atomic.Bool
	cashback := func(msg *message.Message) error {
		var event orderPaid
		if err := json.Unmarshal(msg.Payload, &event); err != nil {
			return err
		}
		tx, err := inbox.RequireTx[*sql.Tx](msg.Context())
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(msg.Context(), db.q(`UPDATE example_wallets SET cents = cents + ? WHERE id = 'alice'`), event.CashbackCents); err != nil {
			return err
		}
		if providerDown.CompareAndSwap(true, false) { // fails once: the redelivery succeeds
			return errors.New("cashback provider timed out")
		}
		return nil
	}
	receipts := func(msg *message.Message) error {
		tx, err := inbox.RequireTx[*sql.Tx](msg.Context())
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(msg.Context(), db.q(`INSERT INTO example_receipts (order_uuid) VALUES (?)`), msg.UUID)
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
		router.AddMiddleware(report(outcomes, db), ib.Middleware)
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
func report(outcomes chan<- outcome, db *database) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			wallet, walletErr := db.walletCents(context.Background())
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
