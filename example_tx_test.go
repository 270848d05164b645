package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox"
)

// A handler takes the inbox transaction from the message context; the type is the
// store's: pgx.Tx for PostgresStore, *sql.Tx for the database/sql stores. Outside the
// inbox there is none.
func ExampleTxFromContext() {
	credit := func(msg *message.Message) error {
		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
		if !ok {
			return fmt.Errorf("no inbox transaction: is the handler behind ib.Middleware, on a PostgresStore?")
		}
		_, err := tx.Exec(msg.Context(), `UPDATE wallets SET cents = cents + 190 WHERE id = $1`, 1)
		return err
	}
	fmt.Println(credit(message.NewMessage("order-1", nil)))
	// Output:
	// no inbox transaction: is the handler behind ib.Middleware, on a PostgresStore?
}

// In a unit test of a handler, ContextWithTx hands it a transaction of the test's own,
// rolled back at the end. Behind the middleware, a transaction already in the message
// context is joined: the key is inserted in it, and its owner commits.
func ExampleContextWithTx() {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() // the test leaves nothing behind

	handler := func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
		_, err := tx.ExecContext(msg.Context(), `UPDATE wallets SET cents = cents + 190 WHERE id = $1`, 1)
		return err
	}
	msg := message.NewMessage("order-1", nil)
	msg.SetContext(inbox.ContextWithTx(ctx, tx))
	if err := handler(msg); err != nil {
		log.Fatal(err)
	}
	var cents int64
	if err := tx.QueryRowContext(ctx, `SELECT cents FROM wallets WHERE id = $1`, 1).Scan(&cents); err != nil {
		log.Fatal(err)
	}
	_ = cents // assert on it
}
