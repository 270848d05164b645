package inboxbun_test

import (
	"database/sql"
	"log"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxbun"
)

// bun on PostgreSQL: the transaction begins in bun, the inbox joins it.
func Example() {
	sqldb, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	store, err := inbox.NewSQLPostgresStore(sqldb, inbox.SQLPostgresConfig{})
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	bunDB := bun.NewDB(sqldb, pgdialect.New()) // the app-wide handle
	txm, err := inboxbun.New(inboxbun.Config{DB: bunDB})
	if err != nil {
		log.Fatal(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	// Retry outside: each retry a fresh transaction. txm outside ib: the inbox joins it.
	router.AddMiddleware(middleware.Retry{MaxRetries: 3}.Middleware, txm.Middleware, ib.Middleware)
	var sub message.Subscriber // Kafka, RabbitMQ...
	router.AddConsumerHandler("billing", "orders", sub, func(msg *message.Message) error {
		tx, err := inboxbun.Tx(msg.Context()) // not bunDB: see the package doc
		if err != nil {
			return err
		}
		_, err = tx.NewUpdate().Model((*Wallet)(nil)).Set("cents = cents + ?", 190).Where("id = ?", 1).Exec(msg.Context())
		return err
	})
}
