package outbox_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/outbox"
)

func ExampleMessageID() {
	// The same consumed message (key "order-1" of consumer "billing") always gives the
	// same id to the CashbackCredited it emits, on every run of the handler.
	fmt.Println(outbox.MessageID("billing", "order-1", "CashbackCredited"))
	fmt.Println(outbox.MessageID("billing", "order-1", "CashbackCredited") == outbox.MessageID("billing", "order-1", "0"))
	// Output:
	// 8ca17389-e0b1-54c0-bb2f-65ed33556aa0
	// false
}

func ExampleOutbox_Publish() {
	ob, err := outbox.New(outbox.Config{ForwarderTopic: "outbox"})
	if err != nil {
		panic(err)
	}
	// A handler behind ib.Middleware: the credit and the event commit together.
	billing := func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
		if _, err := tx.Exec(msg.Context(), `UPDATE wallets SET cents = cents + 190 WHERE id = 'alice'`); err != nil {
			return err
		}
		// The same id on every run of the handler for this message, whatever KeyFunc found
		// its key: MessageID of the claim the inbox put in the context.
		id, err := outbox.MessageIDFromContext(msg.Context(), "CashbackCredited")
		if err != nil {
			return err
		}
		return ob.Publish(msg.Context(), "cashback", message.NewMessage(id, []byte(`{"cents":190}`)))
	}
	_ = billing // router.AddConsumerHandler("billing", "orders", kafkaSub, billing)
}

func ExampleOutbox_InitializeSchema() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	ob, err := outbox.New(outbox.Config{ForwarderTopic: "outbox"})
	if err != nil {
		panic(err)
	}
	// At startup, before any handler publishes: the table watermill_outbox.
	// On MySQL: outbox.Config{SchemaAdapter: sql.DefaultMySQLSchema{}} and
	// ob.InitializeSchema(ctx, sql.BeginnerFromStdSQL(db)).
	if err := ob.InitializeSchema(ctx, sql.BeginnerFromPgx(pool)); err != nil {
		panic(err)
	}
}
