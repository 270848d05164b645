// Command inbox-torture proves the inbox's promise under fire: each message's effect is
// applied exactly once per consumer, while consumer processes race, crash and lose their
// database connections.
//
// It starts -workers consumer processes (itself, re-executed with -worker) on one
// consumer name over -messages messages. Message i credits i+1 to account i%K: the handler
// inserts a ledger entry naming the message key and adds the amount to the account's
// balance, through the inbox transaction. Every message is delivered at least twice:
//
//   - -transport direct: the parent hands each message to -copies workers at once on
//     their stdin, and each calls ib.Process, so the copies race on the key (the
//     concurrent-duplicate wait); a copy that fails or whose worker dies is handed again;
//   - -transport kafka: each record is published -copies times to a topic with one
//     partition per worker; the workers form one consumer group (ib.Middleware in a
//     Watermill router);
//   - -transport rabbitmq: each message is published -copies times to one durable queue
//     that all workers consume (ib.Middleware in a Watermill router);
//   - -transport nats: each message is published -copies times to a JetStream stream, one
//     durable consumer delivers to a queue group of all workers (watermill-nats);
//   - -transport redis: each message is added -copies times to a Redis stream, all workers
//     consume in one consumer group (watermill-redisstream);
//   - -transport kgo: as kafka, but the workers consume with inboxkgo, a batch at a time
//     (franz-go; ProcessBatch, or ProcessOffsets in offset mode). With -poison N, N of
//     the messages are records the loop cannot process (in key mode every other one has
//     no key, the others make the handler refuse them for good): inboxkgo skips them to
//     the run's dead-letter topic and keeps going; the check wants each of them there,
//     and neither applied nor anything else skipped.
//
// With -tenants N, the messages are spread over N tenants, each with a database of its
// own (created and dropped by the run), and the workers route them through an
// inbox.TenantStore (the tenant in the message metadata, or in Process's context); each
// tenant's ledger is then checked on its own.
//
// With -mode offsets (Kafka only: kafka or kgo) the workers run the inbox in offset mode
// (kafkakey.Partition): one row per partition instead of a key per message. Each message
// is then published once (-copies 1): offset mode deduplicates the redeliveries of a
// record, which the kills make, not a producer's copies. The check then wants the stored
// offsets past every record, and no key.
//
// Meanwhile it injects faults: it SIGKILLs a random worker every -kill-every and restarts
// it; workers SIGKILL themselves with probability -crash-rate right after a commit, before
// the ack; it terminates a worker's database connection every -terminate-every
// (pg_terminate_backend, KILL on MariaDB, CLIENT KILL on Redis; SQLite has none); handlers fail with probability -fail-rate after
// writing, so their writes roll back and the message comes again.
//
// With -faults-for, the kills and the terminations stop after that long; the copies left
// must then be handled with no fault before -duration, which tells a message stuck for
// good from a group kept rebalancing by the kills.
//
// When every copy was handled (or -duration passed) it stops the workers and checks the
// ledger per message: each applied exactly once with its amount, none lost, none twice,
// every account's balance right, one inbox key per message. It prints the counts and
// exits 1 on any discrepancy.
//
//	go run ./cmd/inbox-torture -db postgres -transport direct -workers 8 -messages 60
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// options are the command's flags; the parent passes the relevant ones to its workers.
type options struct {
	worker         bool
	slot           int
	db             string
	dsn            string
	dsnChosen      bool // the harness chose -dsn (a new SQLite file) and removes it
	transport      string
	mode           string
	workers        int
	messages       int
	accounts       int
	copies         int
	concurrency    int
	killEvery      time.Duration
	terminateEvery time.Duration
	failRate       float64
	crashRate      float64
	handlerDelay   time.Duration
	duration       time.Duration
	faultsFor      time.Duration
	brokers        string
	amqpURL        string
	natsURL        string
	redisURL       string
	tenants        int
	poison         int
	run            string
	keep           bool
	quiet          bool
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("inbox-torture", flag.ContinueOnError)
	fs.BoolVar(&o.worker, "worker", false, "run as a worker process (the parent starts them)")
	fs.IntVar(&o.slot, "slot", 0, "the worker's slot, kept across restarts (its Kafka group instance id)")
	fs.StringVar(&o.db, "db", "postgres", "database: postgres, mariadb, mysql (MySQL 8+, the same store as MariaDB), tidb, vitess (a vtgate DSN naming a sharded keyspace, with transaction_mode=%27TWOPC%27), redis (redisstore) or sqlite (sqlitestore, one file all processes open)")
	fs.StringVar(&o.dsn, "dsn", "", "database DSN, Redis address or SQLite file (default INBOX_POSTGRES_DSN, INBOX_MARIADB_DSN, INBOX_MYSQL_DSN, INBOX_TIDB_DSN, INBOX_VITESS_DSN or INBOX_REDIS_ADDR, or the local test database; for sqlite a new file in the temporary directory, removed after the run)")
	fs.StringVar(&o.transport, "transport", "direct", "how messages reach the workers: direct, kafka, kgo (inboxkgo batches on franz-go), rabbitmq, nats or redis")
	fs.StringVar(&o.mode, "mode", "keys", "keys (a key per message) or offsets (offset mode: -transport kafka or kgo, -copies 1)")
	fs.IntVar(&o.poison, "poison", 0, "poison messages among -messages (-transport kgo): records the loop skips to a dead-letter topic")
	fs.IntVar(&o.workers, "workers", 8, "consumer processes")
	fs.IntVar(&o.messages, "messages", 60, "messages; message i credits i+1 to account i%accounts")
	fs.IntVar(&o.accounts, "accounts", 10, "ledger accounts")
	fs.IntVar(&o.copies, "copies", 2, "deliveries of each message (at least 2)")
	fs.IntVar(&o.concurrency, "concurrency", 4, "messages a worker handles at once (direct transport)")
	fs.DurationVar(&o.killEvery, "kill-every", time.Second, "SIGKILL a random worker about this often (0: never)")
	fs.DurationVar(&o.terminateEvery, "terminate-every", 2*time.Second, "terminate a worker's database connection about this often (0: never)")
	fs.Float64Var(&o.failRate, "fail-rate", 0.1, "probability that a handler fails after writing")
	fs.Float64Var(&o.crashRate, "crash-rate", 0.02, "probability that a worker SIGKILLs itself right after a commit, before the ack")
	fs.DurationVar(&o.handlerDelay, "handler-delay", 2*time.Millisecond, "a handler sleeps up to this long between its writes, widening the fault windows")
	fs.DurationVar(&o.duration, "duration", 5*time.Minute, "deadline: stop and check even if copies are left unhandled")
	fs.DurationVar(&o.faultsFor, "faults-for", 0, "stop the kills and the terminations after this long, so that what is left must drain with no fault (0: until the end)")
	fs.StringVar(&o.brokers, "kafka-brokers", "", "Kafka brokers (default KAFKA_BROKERS or 127.0.0.1:9092)")
	fs.StringVar(&o.amqpURL, "amqp-url", "", "RabbitMQ URL (default INBOX_AMQP_URL or amqp://guest:guest@127.0.0.1:5672/)")
	fs.StringVar(&o.natsURL, "nats-url", "", "NATS URL, JetStream enabled (default INBOX_NATS_URL or nats://127.0.0.1:4222)")
	fs.StringVar(&o.redisURL, "redis-url", "", "Redis URL (default INBOX_REDIS_URL or redis://127.0.0.1:6379/0)")
	fs.IntVar(&o.tenants, "tenants", 0, "tenant databases (postgres, mariadb, mysql): message i belongs to tenant t<i%tenants>, routed by an inbox.TenantStore, and each tenant's ledger is checked on its own (0: one database)")
	fs.StringVar(&o.run, "run", "", "run id, naming the tables, topic or queue (default: random)")
	fs.BoolVar(&o.keep, "keep", false, "keep the tables, topic and queue after the run")
	fs.BoolVar(&o.quiet, "quiet", false, "print only the final report")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case !slices.Contains([]string{"postgres", "mariadb", "mysql", "tidb", "vitess", "redis", "sqlite"}, o.db):
		return o, fmt.Errorf("-db %q: use postgres, mariadb, mysql, tidb, vitess, redis or sqlite", o.db)
	case !slices.Contains([]string{"direct", "kafka", "kgo", "rabbitmq", "nats", "redis"}, o.transport):
		return o, fmt.Errorf("-transport %q: use direct, kafka, kgo, rabbitmq, nats or redis", o.transport)
	case o.workers < 1, o.messages < 1, o.accounts < 1, o.concurrency < 1:
		return o, fmt.Errorf("-workers, -messages, -accounts and -concurrency must be at least 1")
	case o.mode != "keys" && o.mode != "offsets":
		return o, fmt.Errorf("-mode %q: use keys or offsets", o.mode)
	case o.mode == "offsets" && (!isKafka(o.transport) || o.copies != 1 || !slices.Contains([]string{"postgres", "mariadb", "mysql", "tidb"}, o.db)):
		return o, fmt.Errorf("-mode offsets needs -transport kafka or kgo, -copies 1 (each record once: the kills make the redeliveries) and -db postgres, mariadb, mysql or tidb")
	case o.transport == "kgo" && !slices.Contains([]string{"postgres", "mariadb", "mysql", "tidb", "sqlite"}, o.db):
		return o, fmt.Errorf("-transport kgo needs a store that claims batches: -db postgres, mariadb, mysql, tidb or sqlite")
	case o.poison < 0, o.poison > 0 && o.transport != "kgo", o.poison > o.messages/2:
		return o, fmt.Errorf("-poison %d: use 0, or up to half of -messages with -transport kgo", o.poison)
	case o.copies < 2 && o.mode == "keys":
		return o, fmt.Errorf("-copies is %d: every message is delivered at least twice", o.copies)
	case o.transport == "direct" && o.copies > o.workers:
		return o, fmt.Errorf("-copies %d > -workers %d: the direct transport hands the copies of a message to distinct workers", o.copies, o.workers)
	case o.failRate < 0 || o.failRate >= 1, o.crashRate < 0 || o.crashRate >= 1:
		return o, fmt.Errorf("-fail-rate and -crash-rate are probabilities below 1")
	case o.tenants < 0, o.tenants > 0 && (!slices.Contains([]string{"postgres", "mariadb", "mysql"}, o.db) || o.transport == "kgo"):
		return o, fmt.Errorf("-tenants %d: use 0, or a number of tenant databases with -db postgres, mariadb or mysql (not -transport kgo)", o.tenants)
	}
	if o.dsn == "" {
		o.dsn = defaultDSN(o.db)
	}
	if o.brokers == "" {
		o.brokers = envOr("KAFKA_BROKERS", "127.0.0.1:9092")
	}
	if o.amqpURL == "" {
		o.amqpURL = envOr("INBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	}
	if o.natsURL == "" {
		o.natsURL = envOr("INBOX_NATS_URL", "nats://127.0.0.1:4222")
	}
	if o.redisURL == "" {
		o.redisURL = envOr("INBOX_REDIS_URL", "redis://127.0.0.1:6379/0")
	}
	if o.run == "" {
		o.run = fmt.Sprintf("torture_%d_%06x", time.Now().Unix()%1e6, rand.Uint32()&0xffffff)
	}
	if o.db == "sqlite" && o.dsn == "" {
		o.dsn, o.dsnChosen = filepath.Join(os.TempDir(), "inbox-"+o.run+".db"), true
	}
	return o, nil
}

// isKafka reports whether transport consumes Kafka: through Watermill (kafka) or
// inboxkgo (kgo).
func isKafka(transport string) bool { return transport == "kafka" || transport == "kgo" }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func defaultDSN(db string) string {
	switch db {
	case "mariadb":
		return envOr("INBOX_MARIADB_DSN", "root@tcp(127.0.0.1:3306)/test")
	case "mysql":
		return envOr("INBOX_MYSQL_DSN", "root@tcp(127.0.0.1:3307)/test")
	case "redis":
		return envOr("INBOX_REDIS_ADDR", "127.0.0.1:6379")
	case "tidb":
		return envOr("INBOX_TIDB_DSN", "root@tcp(127.0.0.1:4000)/test")
	case "vitess":
		return envOr("INBOX_VITESS_DSN", "root@tcp(127.0.0.1:15303)/inbox?transaction_mode=%27TWOPC%27")
	case "sqlite":
		return "" // a new file per run: see parseFlags
	}
	return envOr("INBOX_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "inbox-torture:", err)
		os.Exit(2)
	}
	if o.worker {
		if err := runWorker(context.Background(), o); err != nil {
			fmt.Fprintln(os.Stderr, "inbox-torture worker:", err)
			os.Exit(1)
		}
		return
	}
	ok, err := runParent(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inbox-torture:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}
