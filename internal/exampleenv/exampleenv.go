// Package exampleenv is what the runnable programs in _examples share: the servers'
// addresses from the environment, the dev Kafka broker, the PostgreSQL ledger that the
// broker examples credit, and a Router run until what an example waits for has happened.
// It is their plumbing only: what an example shows (the inbox's configuration, the
// handler that takes the inbox's transaction, what it prints) stays in the example.
package exampleenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
)

// Env returns the environment variable name, or def when it is unset or empty.
func Env(name, def string) string { return cmp.Or(os.Getenv(name), def) }

// PostgresDSN is INBOX_POSTGRES_DSN, or the local test database.
func PostgresDSN() string {
	return Env("INBOX_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

// MariaDBDSN is INBOX_MARIADB_DSN, or the local MariaDB.
func MariaDBDSN() string { return Env("INBOX_MARIADB_DSN", "root@tcp(127.0.0.1:3306)/test") }

// AMQPURL is INBOX_AMQP_URL, or the local RabbitMQ.
func AMQPURL() string { return Env("INBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/") }

// NATSURL is INBOX_NATS_URL, or the local NATS (JetStream enabled).
func NATSURL() string { return Env("INBOX_NATS_URL", "nats://127.0.0.1:4222") }

// RedisURL is INBOX_REDIS_URL, or the local Redis.
func RedisURL() string { return Env("INBOX_REDIS_URL", "redis://127.0.0.1:6379/0") }

// Kafka is the Kafka an example uses: KAFKA_BROKERS, or the dev broker (cmd/kafka-dev).
type Kafka struct {
	Brokers []string
	// How says where Brokers came from, for the example to print.
	How    string
	script string // scripts/kafka-dev.sh when StartKafka started the dev broker
}

// StartKafka returns KAFKA_BROKERS when it is set. Otherwise it returns the dev broker on
// 127.0.0.1:$KAFKA_DEV_PORT (default 9092): the broker that already listens there, or one
// it starts with scripts/kafka-dev.sh, which Stop stops.
func StartKafka() (*Kafka, error) {
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		return &Kafka{Brokers: strings.Split(env, ","), How: "using KAFKA_BROKERS=" + env}, nil
	}
	addr := "127.0.0.1:" + Env("KAFKA_DEV_PORT", "9092") // scripts/kafka-dev.sh reads it too
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = conn.Close()
		return &Kafka{Brokers: []string{addr}, How: "a broker already listens on " + addr + ", using it"}, nil
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "kafka-dev.sh")
	if out, err := exec.Command(script, "start").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("KAFKA_BROKERS is unset and starting the dev broker with %s failed (set KAFKA_BROKERS, or see the script's output): %w\n%s", script, err, out)
	}
	return &Kafka{Brokers: []string{addr}, How: "started the dev broker (cmd/kafka-dev) on " + addr, script: script}, nil
}

// Stop stops the dev broker if StartKafka started it, and reports whether it did.
func (k *Kafka) Stop() bool {
	if k.script == "" {
		return false
	}
	_ = exec.Command(k.script, "stop").Run()
	return true
}

// Ledger is the PostgreSQL side of the broker examples: a pool, the inbox's store on
// the table inbox_example, and the table example_ledger that their handlers credit.
type Ledger struct {
	Pool  *pgxpool.Pool
	Store *inbox.PostgresStore
}

// OpenLedger connects to PostgresDSN and creates both tables when they are missing.
func OpenLedger(ctx context.Context) (*Ledger, error) {
	pool, err := pgxpool.New(ctx, PostgresDSN())
	if err != nil {
		return nil, err
	}
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: "inbox_example"})
	if err == nil {
		err = store.CreateSchema(ctx)
	}
	if err == nil {
		_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_ledger (message_uuid text NOT NULL, account text NOT NULL, amount int NOT NULL)`)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL at INBOX_POSTGRES_DSN: %w", err)
	}
	return &Ledger{Pool: pool, Store: store}, nil
}

// Close closes the pool.
func (l *Ledger) Close() { l.Pool.Close() }

// Credit reads a payload "account amount" and credits it to the ledger under ref
// through tx, the inbox's transaction: it commits with the message's key, or not at all.
func Credit(ctx context.Context, tx pgx.Tx, ref string, payload []byte) (account string, amount int, err error) {
	if _, err := fmt.Sscan(string(payload), &account, &amount); err != nil {
		return "", 0, fmt.Errorf("payload %q is not \"account amount\": %w", payload, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO example_ledger VALUES ($1, $2, $3)`, ref, account, amount); err != nil {
		return "", 0, err
	}
	return account, amount, nil
}

// CheckAppliedOnce checks that the ledger holds exactly one row for each ref, the effect
// of one message however often it was delivered, and prints it as the example's step.
func (l *Ledger) CheckAppliedOnce(ctx context.Context, step int, refs ...string) error {
	for _, ref := range refs {
		var rows, amount int
		if err := l.Pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM example_ledger WHERE message_uuid = $1`, ref).Scan(&rows, &amount); err != nil {
			return err
		}
		if rows != 1 {
			return fmt.Errorf("ledger: %d rows for message %s, where the inbox should have let one through", rows, ref)
		}
		fmt.Printf("%d. ledger: 1 row for message %s, %d credited: applied once\n", step, ref, amount)
	}
	return nil
}

// RunUntil runs router until done reports true, for a minute at most, then stops it and
// returns its error. When done is still false by then, or the router stopped first, the
// error is failure (e.g. "the second delivery did not arrive") and why.
func RunUntil(ctx context.Context, router *message.Router, failure string, done func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- router.Run(ctx) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case err := <-stopped:
			return errors.Join(fmt.Errorf("%s: the router stopped first", failure), err)
		case <-ctx.Done():
			err := <-stopped
			if done() {
				return err
			}
			return errors.Join(fmt.Errorf("%s within a minute", failure), err)
		case <-tick.C:
		}
	}
	cancel()
	return <-stopped
}
