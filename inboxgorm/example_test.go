package inboxgorm_test

import (
	"database/sql"
	"log"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxgorm"
)

type Wallet struct {
	ID    int64
	Cents int64
}

// A handler writing through GORM in the inbox transaction, on MySQL or MariaDB.
func ExampleDB() {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		log.Fatal(err)
	}
	store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{})
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	gdb, err := gorm.Open(mysql.New(mysql.Config{Conn: db}), &gorm.Config{}) // the app-wide handle
	if err != nil {
		log.Fatal(err)
	}

	handler := func(msg *message.Message) error {
		tx, err := inboxgorm.DB(msg.Context(), gdb) // not gdb itself: see the package doc
		if err != nil {
			return err
		}
		return tx.Model(&Wallet{ID: 1}).Update("cents", gorm.Expr("cents + ?", 190)).Error
	}
	router, err := message.NewRouter(message.RouterConfig{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	var sub message.Subscriber // Kafka, RabbitMQ...
	router.AddMiddleware(ib.Middleware)
	router.AddConsumerHandler("billing", "orders", sub, handler)
}
