// Package brokertest holds what the broker tests (kafkakey, amqpkey, e2e) share: the
// services they reach, and the PostgreSQL tables they write. Outside CI a service that
// cannot be reached skips the test, naming the variable to set; under CI (CI=true) it
// fails it.
package brokertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/watermill-inbox/inbox"
)

const (
	defaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
	devKafkaBrokers    = "127.0.0.1:9092"
)

// Unavailable fails the test under CI and skips it elsewhere.
func Unavailable(t testing.TB, what, variable string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable (set %s): %v", what, variable, err)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Name returns a fresh name for a table, topic or queue of one test.
func Name(prefix string) string {
	return fmt.Sprintf("%s_%d_%08x", prefix, time.Now().UnixNano()%1e6, rand.Uint32())
}

// PostgresDSN is INBOX_POSTGRES_DSN or the local test database.
func PostgresDSN() string {
	if dsn := os.Getenv("INBOX_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return defaultPostgresDSN
}

// PgPool returns a pool on the test PostgreSQL, closed when the test ends.
func PgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(PostgresDSN())
	if err != nil {
		t.Fatalf("INBOX_POSTGRES_DSN: %v", err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		Unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Store returns a PostgresStore on the table (created if missing). With drop, the
// tables are dropped when the test ends.
func Store(t testing.TB, pool *pgxpool.Pool, table string, drop bool) *inbox.PostgresStore {
	t.Helper()
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	if drop {
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s`,
				pgx.Identifier{table}.Sanitize(), pgx.Identifier{table + "_attempts"}.Sanitize(), pgx.Identifier{table + "_offsets"}.Sanitize()))
		})
	}
	return store
}

// Keys returns the keys a consumer has in the inbox table.
func Keys(t testing.TB, pool *pgxpool.Pool, table, consumer string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT key FROM `+pgx.Identifier{table}.Sanitize()+` WHERE consumer = $1 ORDER BY key`, consumer)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// Ledger is a table of effects written through the inbox transaction: one row per
// applied message, with no unique constraint, so that a message applied twice shows.
type Ledger struct {
	Pool  *pgxpool.Pool
	Table string
}

// NewLedger creates a ledger table. With drop, it is dropped when the test ends.
func NewLedger(t testing.TB, pool *pgxpool.Pool, table string, drop bool) Ledger {
	t.Helper()
	l := Ledger{Pool: pool, Table: table}
	if _, err := pool.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS `+l.ident()+` (id serial PRIMARY KEY, source text NOT NULL, ref text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if drop {
		t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+l.ident()) })
	}
	return l
}

func (l Ledger) ident() string { return pgx.Identifier{l.Table}.Sanitize() }

// Apply records ref as applied, through the pgx.Tx the inbox put in ctx.
func (l Ledger) Apply(ctx context.Context, source, ref string) error {
	tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
	if !ok {
		return fmt.Errorf("no pgx.Tx in the message context: is the handler behind ib.Middleware?")
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+l.ident()+` (source, ref) VALUES ($1, $2)`, source, ref)
	return err
}

// Counts returns the number of rows and of distinct refs.
func (l Ledger) Counts(t testing.TB) (rows, distinct int) {
	t.Helper()
	err := l.Pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT (source, ref)) FROM `+l.ident()).Scan(&rows, &distinct)
	if err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

// Applied returns how many times ref was applied.
func (l Ledger) Applied(t testing.TB, ref string) int {
	t.Helper()
	var n int
	if err := l.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+l.ident()+` WHERE ref = $1`, ref).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Outcomes is an inbox.Observer that counts outcomes.
type Outcomes struct {
	mu sync.Mutex
	n  map[inbox.Outcome]int
}

// Observe implements inbox.Observer.
func (o *Outcomes) Observe(_ context.Context, ob inbox.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[inbox.Outcome]int{}
	}
	o.n[ob.Outcome]++
}

// Count returns how many times outcome was observed.
func (o *Outcomes) Count(outcome inbox.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[outcome]
}

var startKafkaOnce sync.Once

// KafkaBrokers returns KAFKA_BROKERS. When it is unset outside CI, it starts the dev
// broker with scripts/kafka-dev.sh (127.0.0.1:9092); under CI it fails the test.
func KafkaBrokers(t testing.TB) []string {
	t.Helper()
	env := os.Getenv("KAFKA_BROKERS")
	if env == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("KAFKA_BROKERS is not set: .ci/run starts the dev broker (scripts/kafka-dev.sh) and sets it")
		}
		var startErr error
		startKafkaOnce.Do(func() {
			_, file, _, _ := runtime.Caller(0)
			script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "kafka-dev.sh")
			out, err := exec.Command(script).CombinedOutput()
			if err != nil {
				startErr = fmt.Errorf("%s: %v: %s", script, err, out)
			}
		})
		if startErr != nil {
			Unavailable(t, "Kafka", "KAFKA_BROKERS", startErr)
		}
		env = devKafkaBrokers
	}
	brokers := strings.Split(env, ",")
	conn, err := net.DialTimeout("tcp", brokers[0], 3*time.Second)
	if err != nil {
		Unavailable(t, "Kafka", "KAFKA_BROKERS", err)
	}
	_ = conn.Close()
	return brokers
}

// SaramaSubscriberConfig is the consumer config the tests use with the dev broker: read
// a new group from the oldest offset, short long-polls (a synchronous offset commit
// waits behind the fetch), a 2 s session so that a killed member is replaced quickly.
func SaramaSubscriberConfig() *sarama.Config {
	sc := kafka.DefaultSaramaSubscriberConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	sc.Consumer.Group.Session.Timeout = 2 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	return sc
}

// CreateTopic creates a topic with partitions partitions, deleted when the test ends.
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int32) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, kafka.DefaultSaramaSubscriberConfig())
	if err != nil {
		Unavailable(t, "Kafka", "KAFKA_BROKERS", err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
	t.Cleanup(func() {
		if admin, err := sarama.NewClusterAdmin(brokers, kafka.DefaultSaramaSubscriberConfig()); err == nil {
			_ = admin.DeleteTopic(topic)
			_ = admin.Close()
		}
	})
}

// AMQPURL returns INBOX_AMQP_URL or the local RabbitMQ, after checking it accepts a
// connection.
func AMQPURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("INBOX_AMQP_URL")
	if url == "" {
		url = defaultAMQPURL
	}
	conn, err := amqp091.Dial(url)
	if err != nil {
		Unavailable(t, "RabbitMQ", "INBOX_AMQP_URL", err)
	}
	_ = conn.Close()
	return url
}

// DeleteQueueOnCleanup deletes the queue when the test ends.
func DeleteQueueOnCleanup(t testing.TB, url, queue string) {
	t.Cleanup(func() {
		conn, err := amqp091.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
		}
	})
}
