package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/watermill-inbox/inbox"
)

// New checks the config, naming the field and what to do, before it touches the
// database.
func ExampleNew() {
	_, err := inbox.New(inbox.Config{})
	fmt.Println(err)
	// Output:
	// inbox: invalid config: Store is nil: set it to inbox.NewPostgresStore(pool, inbox.PostgresConfig{}) or another store
}

// The pgx store, on a pool. Its handlers get a pgx.Tx.
func ExampleNewPostgresStore() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{
		LockTimeout: 5 * time.Second, // a concurrent duplicate gives up with ErrContended
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateSchema(ctx); err != nil { // or schema/postgres.sql, or migrations/postgres
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	_ = ib
}

// PostgreSQL through database/sql (pgx's stdlib driver), for GORM, bun, ent, sqlx and
// sqlc on database/sql. Its handlers get a *sql.Tx. Table names are checked before any
// connection is made.
func ExampleNewSQLPostgresStore() {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test") // connects lazily
	if err != nil {
		log.Fatal(err)
	}
	_, err = inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Table: "inbox-billing"})
	fmt.Println(err)
	// Output:
	// inbox: invalid store config: Table "inbox-billing" is not a valid table name: use letters, digits and underscores, not starting with a digit, at most 48 bytes
}

// MySQL 8+ and MariaDB 10.11+, any DSN. Its handlers get a *sql.Tx.
func ExampleNewMySQLStore() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		log.Fatal(err)
	}
	store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{LockTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateSchema(ctx); err != nil { // or schema/mysql.sql, or migrations/mysql
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	_ = ib
}

// The middleware on one handler, outside a Router: Config.Consumer names the consumer,
// which a Router would take from the handler name.
func ExampleInbox_Middleware() {
	var store inbox.Store // from NewPostgresStore, NewSQLPostgresStore or NewMySQLStore
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	handler := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
		_, err := tx.ExecContext(msg.Context(), "UPDATE wallets SET cents = cents + 190 WHERE id = 1")
		return nil, err // nil: the update and the key commit; an error: both roll back
	})
	produced, err := handler(message.NewMessage("order-1", nil))
	if err != nil {
		log.Fatal(err) // not acked: the message comes again
	}
	_ = produced // a Router would publish them, then ack
}

// Purge refuses a cutoff younger than MinRetention before it touches the database: a
// purged key makes the next delivery of its message new again.
func ExamplePurge() {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test") // connects lazily
	if err != nil {
		log.Fatal(err)
	}
	store, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = inbox.Purge(context.Background(), store, inbox.PurgeConfig{OlderThan: 24 * time.Hour})
	fmt.Println(errors.Is(err, inbox.ErrRetention))
	// Output:
	// true
}
