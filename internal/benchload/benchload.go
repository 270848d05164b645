// Package benchload holds the workloads of the inbox benchmarks, shared by the Go
// benchmarks (bench_test.go) and the load command (cmd/inbox-load): a handler that
// updates an account row in its transaction, run with the inbox or in a plain
// transaction, a naive check-then-mark store to compare with, and the runner that
// measures them A/B/A/B in one process.
package benchload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/watermill-inbox/inbox"
)

// Accounts is how many account rows the handler spreads its updates over: enough that
// 16 workers rarely wait on each other's row lock.
const Accounts = 4096

// Op handles one message with the given key.
type Op func(ctx context.Context, key string) error

// Target is one database reached through one store flavour, with its tables.
type Target struct {
	// Flavour is pgx, sqlpg, mariadb or mysql.
	Flavour string
	Pool    *pgxpool.Pool // pgx
	DB      *sql.DB       // sqlpg, mariadb, mysql
	Store   inbox.Store
	Inbox   *inbox.Inbox
	// Unfolded is the inbox over a store that cannot take its shortcut, to measure what
	// the shortcut buys: on pgx a PostgresStore that cannot fold its insert into the BEGIN
	// (the pool is hidden behind another PgxDB), on MariaDB and MySQL a MySQLStore that
	// cannot prepare its insert (the *sql.DB is hidden behind another SQLDB). Nil for
	// sqlpg.
	Unfolded *inbox.Inbox
	// Stmts is how many statements the handler runs: 1 (an UPDATE) or 3 (an UPDATE,
	// an INSERT into a log table and a SELECT).
	Stmts int

	InboxTable, accounts, log, naive string
	consumer                         string
	variants                         []string
	parts                            partitions // offset mode's partitions (WithOffsets)

	oneMu sync.Mutex
	one   *sql.DB // sqlite: a handle of one connection, for HandWritten

	// HandWrittenHTTP's statements and transaction options on MariaDB and MySQL,
	// prepared once.
	hwOnce                       sync.Once
	hwErr                        error
	hwOpts                       *sql.TxOptions
	hwInsert, hwOutput, hwStored *sql.Stmt

	// multi is a second handle on the MariaDB or MySQL database, its DSN with
	// multiStatements=true, for HandWrittenHTTPMulti; opened once.
	multiOnce sync.Once
	multiErr  error
	multi     *sql.DB
	multiRC   bool // the session is at READ COMMITTED already
}

func (t *Target) mysql() bool { return t.Flavour == "mariadb" || t.Flavour == "mysql" }

func (t *Target) ph(n int) string {
	if t.mysql() || t.Flavour == "sqlite" {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

func (t *Target) quote(name string) string {
	if t.mysql() {
		return "`" + name + "`"
	}
	return pgx.Identifier{name}.Sanitize()
}

// Exec runs a statement outside any transaction.
func (t *Target) Exec(ctx context.Context, q string, args ...any) error {
	if t.Pool != nil {
		_, err := t.Pool.Exec(ctx, q, args...)
		return err
	}
	_, err := t.DB.ExecContext(ctx, q, args...)
	return err
}

// QueryInt runs a query returning one integer.
func (t *Target) QueryInt(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	var err error
	if t.Pool != nil {
		err = t.Pool.QueryRow(ctx, q, args...).Scan(&n)
	} else {
		err = t.DB.QueryRowContext(ctx, q, args...).Scan(&n)
	}
	return n, err
}

// NewTarget creates the tables of one benchmark run (suffix makes them unique) and the
// store and inbox on them. inboxTable, when set, is an existing inbox table to use (the
// 10 M keys one); otherwise a fresh one is created. Drop removes what it created; after
// an error too, when the returned Target is not nil.
func NewTarget(ctx context.Context, flavour string, pool *pgxpool.Pool, db *sql.DB, stmts int, suffix, inboxTable string) (*Target, error) {
	t := &Target{Flavour: flavour, Pool: pool, DB: db, Stmts: stmts, consumer: "bench",
		InboxTable: inboxTable, accounts: "bench_acct_" + suffix, log: "bench_log_" + suffix, naive: "bench_naive_" + suffix}
	if t.InboxTable == "" {
		t.InboxTable = "bench_inbox_" + suffix
	}
	var err error
	switch flavour {
	case "pgx":
		t.Store, err = inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: t.InboxTable})
	case "sqlpg":
		t.Store, err = inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Table: t.InboxTable})
	case "mariadb", "mysql":
		t.Store, err = inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: t.InboxTable})
	case "sqlite":
		t.Store, err = t.sqliteStore()
	default:
		err = fmt.Errorf("unknown flavour %q: use pgx, sqlpg, mariadb, mysql or sqlite", flavour)
	}
	if err != nil {
		return nil, err
	}
	if err := t.Store.(interface{ CreateSchema(context.Context) error }).CreateSchema(ctx); err != nil {
		return t, err
	}
	ddl := []string{
		`CREATE TABLE ` + t.quote(t.accounts) + ` (id int PRIMARY KEY, n bigint NOT NULL)`,
		`CREATE TABLE ` + t.quote(t.log) + ` (id bigint PRIMARY KEY, msg varchar(200) NOT NULL)`,
		// The naive store's marks: a unique key too, but the mark is written with an
		// insert that ignores a conflict, as the check already said "new".
		`CREATE TABLE ` + t.quote(t.naive) + ` (k varchar(200) PRIMARY KEY)`,
	}
	if t.mysql() {
		ddl = append(ddl, `INSERT INTO `+t.quote(t.accounts)+` (id, n) SELECT seq, 0 FROM seq_0_to_`+strconv.Itoa(Accounts-1))
		if flavour == "mysql" { // no sequence engine, and recursive CTEs stop at 1000 rows
			d := "(SELECT 0 i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7)"
			ddl[len(ddl)-1] = `INSERT INTO ` + t.quote(t.accounts) + ` (id, n) SELECT a.i + 8*b.i + 64*c.i + 512*d.i, 0 FROM ` +
				d + ` a, ` + d + ` b, ` + d + ` c, ` + d + ` d`
		}
	} else if flavour == "sqlite" {
		ddl = append(ddl, t.sqliteAccounts())
	} else {
		ddl = append(ddl, `INSERT INTO `+t.quote(t.accounts)+` (id, n) SELECT g, 0 FROM generate_series(0, `+strconv.Itoa(Accounts-1)+`) g`)
	}
	for _, q := range ddl {
		if err := t.Exec(ctx, q); err != nil {
			return t, fmt.Errorf("%s: %w", q, err)
		}
	}
	t.Inbox, err = inbox.New(inbox.Config{Store: t.Store, Consumer: t.consumer})
	var plain inbox.Store
	switch {
	case err != nil:
	case flavour == "pgx":
		plain, err = inbox.NewPostgresStore(hiddenPool{pool}, inbox.PostgresConfig{Table: t.InboxTable})
	case t.mysql():
		plain, err = inbox.NewMySQLStore(hiddenSQL{db}, inbox.MySQLConfig{Table: t.InboxTable})
	}
	if err == nil && plain != nil {
		t.Unfolded, err = inbox.New(inbox.Config{Store: plain, Consumer: t.consumer})
	}
	return t, err
}

// hiddenPool is a PgxDB that is not a *pgxpool.Pool.
type hiddenPool struct{ inbox.PgxDB }

// hiddenSQL is a SQLDB that is not a *sql.DB.
type hiddenSQL struct{ inbox.SQLDB }

// Behind returns the handler's work behind ib (Inbox.Process), for an inbox other than
// the Target's own on the same tables: one over a TenantStore routing to Store.
func (t *Target) Behind(ib *inbox.Inbox) Op { return t.behind(ib) }

// WithUnfolded is WithInbox through Unfolded.
func (t *Target) WithUnfolded(ctx context.Context, key string) error {
	return t.behind(t.Unfolded)(ctx, key)
}

// behind returns the handler's work behind ib (Inbox.Process).
func (t *Target) behind(ib *inbox.Inbox) Op {
	return func(ctx context.Context, key string) error {
		_, err := ib.Process(ctx, t.consumer, key, func(ctx context.Context) error {
			return t.work(ctx, txOf(ctx), key)
		})
		return err
	}
}

// Drop drops the tables NewTarget created, the inbox table only when dropInbox.
func (t *Target) Drop(ctx context.Context, dropInbox bool) error {
	if t.one != nil {
		_ = t.one.Close()
	}
	if t.multi != nil {
		_ = t.multi.Close()
	}
	tables := append([]string{t.accounts, t.log, t.naive}, t.variants...)
	if dropInbox {
		tables = append(tables, t.InboxTable, t.InboxTable+"_attempts", t.InboxTable+"_offsets")
	}
	var errs []error
	for _, name := range tables {
		errs = append(errs, t.Exec(ctx, `DROP TABLE IF EXISTS `+t.quote(name)))
	}
	return errors.Join(errs...)
}

// account picks the account row a key updates.
func account(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % Accounts)
}

var logID atomic.Int64

func init() { logID.Store(time.Now().UnixNano()) }

// sqlRunner is a *sql.Tx, or the *sql.Conn of a transaction begun by hand
// (HandWrittenHTTPMulti).
type sqlRunner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// work runs the handler's statements in tx (a pgx.Tx, a *sql.Tx or a sqlRunner).
func (t *Target) work(ctx context.Context, tx any, key string) error {
	id := account(key)
	upd := `UPDATE ` + t.quote(t.accounts) + ` SET n = n + 1 WHERE id = ` + t.ph(1)
	ins := `INSERT INTO ` + t.quote(t.log) + ` (id, msg) VALUES (` + t.ph(1) + `, ` + t.ph(2) + `)`
	sel := `SELECT n FROM ` + t.quote(t.accounts) + ` WHERE id = ` + t.ph(1)
	switch tx := tx.(type) {
	case pgx.Tx:
		if _, err := tx.Exec(ctx, upd, id); err != nil || t.Stmts == 1 {
			return err
		}
		if _, err := tx.Exec(ctx, ins, logID.Add(1), key); err != nil {
			return err
		}
		var n int64
		return tx.QueryRow(ctx, sel, id).Scan(&n)
	case sqlRunner:
		if _, err := tx.ExecContext(ctx, upd, id); err != nil || t.Stmts == 1 {
			return err
		}
		if _, err := tx.ExecContext(ctx, ins, logID.Add(1), key); err != nil {
			return err
		}
		var n int64
		return tx.QueryRowContext(ctx, sel, id).Scan(&n)
	}
	return fmt.Errorf("unexpected transaction %T", tx)
}

// Baseline is the handler in its own plain transaction: BEGIN; statements; COMMIT.
func (t *Target) Baseline(ctx context.Context, key string) error {
	if t.Pool != nil {
		return pgx.BeginFunc(ctx, t.Pool, func(tx pgx.Tx) error { return t.work(ctx, tx, key) })
	}
	return t.sqlBaseline(ctx, key, nil)
}

// sqlBaseline is Baseline on database/sql, beginning with opts.
func (t *Target) sqlBaseline(ctx context.Context, key string, opts *sql.TxOptions) error {
	tx, err := t.DB.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := t.work(ctx, tx, key); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// BaselineRC is Baseline asking database/sql for READ COMMITTED explicitly, as the
// stores do: on MySQL and MariaDB the driver then sends SET TRANSACTION ISOLATION LEVEL
// as a round trip of its own. Baseline on pgx.
func (t *Target) BaselineRC(ctx context.Context, key string) error {
	if t.Pool != nil {
		return t.Baseline(ctx, key)
	}
	return t.sqlBaseline(ctx, key, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
}

// WithInbox is the handler behind the inbox (Inbox.Process).
func (t *Target) WithInbox(ctx context.Context, key string) error {
	return t.behind(t.Inbox)(ctx, key)
}

func txOf(ctx context.Context) any {
	if tx, ok := inbox.TxFromContext[pgx.Tx](ctx); ok {
		return tx
	}
	tx, _ := inbox.TxFromContext[*sql.Tx](ctx)
	return tx
}

// Naive is the common check-then-mark approach: in one transaction, SELECT the key; if
// it is absent, run the handler and INSERT the key, ignoring a conflict. Two deliveries
// racing both see "absent" and both apply. It returns whether it skipped a duplicate.
func (t *Target) Naive(ctx context.Context, key string) (skipped bool, err error) {
	check := `SELECT count(*) FROM ` + t.quote(t.naive) + ` WHERE k = ` + t.ph(1)
	mark := `INSERT INTO ` + t.quote(t.naive) + ` (k) VALUES (` + t.ph(1) + `) ON CONFLICT DO NOTHING`
	if t.mysql() {
		mark = `INSERT IGNORE INTO ` + t.quote(t.naive) + ` (k) VALUES (?)`
	}
	if t.Pool != nil {
		err = pgx.BeginFunc(ctx, t.Pool, func(tx pgx.Tx) error {
			var n int
			if err := tx.QueryRow(ctx, check, key).Scan(&n); err != nil || n > 0 {
				skipped = n > 0
				return err
			}
			if err := t.work(ctx, tx, key); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, mark, key)
			return err
		})
		return skipped, err
	}
	tx, err := t.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRowContext(ctx, check, key).Scan(&n); err != nil || n > 0 {
		return n > 0, err
	}
	if err := t.work(ctx, tx, key); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, mark, key); err != nil {
		return false, err
	}
	return false, tx.Commit()
}

// Applied returns the total of the account counters: how many times handlers applied.
func (t *Target) Applied(ctx context.Context) (int64, error) {
	return t.QueryInt(ctx, `SELECT coalesce(sum(n), 0) FROM `+t.quote(t.accounts))
}

// Keys counts the inbox table's rows.
func (t *Target) Keys(ctx context.Context) (int64, error) {
	return t.QueryInt(ctx, `SELECT count(*) FROM `+t.quote(t.InboxTable))
}

// Result is one measured run.
type Result struct {
	Ops     int
	Elapsed time.Duration
	// Latencies of each op, sorted.
	Latencies []time.Duration
}

// Rate returns ops per second.
func (r Result) Rate() float64 {
	if r.Ops == 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Percentile returns the p-th percentile latency (0 < p <= 100).
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.Latencies))*p/100+0.5) - 1
	return r.Latencies[max(0, min(i, len(r.Latencies)-1))]
}

// Keyer returns fresh keys: prefix-0, prefix-1, ...
type Keyer struct {
	prefix string
	n      atomic.Int64
}

// NewKeyer returns a Keyer with a random prefix.
func NewKeyer() *Keyer { return &Keyer{prefix: strconv.FormatUint(rand.Uint64(), 36)} }

// Next returns the next key.
func (k *Keyer) Next() string { return k.prefix + "-" + strconv.FormatInt(k.n.Add(1), 10) }

// Run runs op with workers goroutines until n ops are done (n > 0) or, with n == 0,
// until d has passed; key(i) gives the i-th op's key.
func Run(ctx context.Context, workers, n int, d time.Duration, key func(i int) string, op Op) (Result, error) {
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var mine []time.Duration
			for {
				i := int(next.Add(1)) - 1
				if n > 0 && i >= n || n == 0 && time.Now().After(deadline) {
					break
				}
				t0 := time.Now()
				if err := op(ctx, key(i)); err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					next.Store(1 << 62)
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	r := Result{Ops: len(lat), Elapsed: time.Since(start), Latencies: lat}
	slices.Sort(r.Latencies)
	return r, firstErr
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// AB is an interleaved comparison of a baseline A and a candidate B.
type AB struct {
	A, B Result
	// RatesA and RatesB are the rates (ops/s) of each round; Ratios are B's over A's.
	RatesA, RatesB, Ratios []float64
}

// Ratio returns the median of the per-round ratios.
func (r AB) Ratio() float64 { return Median(r.Ratios) }

// Median returns the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Compare runs A and B in turns (A, B, A, B, ...) for rounds rounds, each of n ops (or of
// duration d when n is 0), with fresh keys, and sums what each did.
func Compare(ctx context.Context, rounds, workers, n int, d time.Duration, a, b Op) (AB, error) {
	var ab AB
	keys := NewKeyer()
	key := func(int) string { return keys.Next() }
	add := func(sum *Result, r Result) {
		sum.Ops += r.Ops
		sum.Elapsed += r.Elapsed
		sum.Latencies = append(sum.Latencies, r.Latencies...)
	}
	for range rounds {
		ra, err := Run(ctx, workers, n, d, key, a)
		if err != nil {
			return ab, fmt.Errorf("baseline: %w", err)
		}
		rb, err := Run(ctx, workers, n, d, key, b)
		if err != nil {
			return ab, fmt.Errorf("candidate: %w", err)
		}
		add(&ab.A, ra)
		add(&ab.B, rb)
		ab.RatesA = append(ab.RatesA, ra.Rate())
		ab.RatesB = append(ab.RatesB, rb.Rate())
		ab.Ratios = append(ab.Ratios, rb.Rate()/ra.Rate())
	}
	slices.Sort(ab.A.Latencies)
	slices.Sort(ab.B.Latencies)
	return ab, nil
}

// Prefill inserts n keys of consumer, prefix0 .. prefix<n-1>, processed age ago, in
// chunks of one statement each (generate_series on PostgreSQL, the sequence engine on
// MariaDB).
func Prefill(ctx context.Context, t *Target, consumer, prefix string, n int, age time.Duration) error {
	const chunk = 1_000_000
	for from := 0; from < n; from += chunk {
		to := min(n, from+chunk) - 1
		var q string
		switch t.Flavour {
		case "pgx", "sqlpg":
			q = fmt.Sprintf(`INSERT INTO %s (consumer, key, processed_at) SELECT $1, $2 || g, now() - make_interval(secs => $3) FROM generate_series(%d, %d) g`,
				t.quote(t.InboxTable), from, to)
		case "mariadb":
			q = fmt.Sprintf("INSERT INTO %s (`consumer`, `key`, `processed_at`) SELECT ?, CONCAT(?, seq), UTC_TIMESTAMP(6) - INTERVAL ? SECOND FROM seq_%d_to_%d",
				t.quote(t.InboxTable), from, to)
		default:
			return fmt.Errorf("prefill: %s is not supported: use pgx or mariadb", t.Flavour)
		}
		if err := t.Exec(ctx, q, consumer, prefix, int64(age.Seconds())); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	if t.Flavour == "mariadb" {
		return t.Exec(ctx, "ANALYZE TABLE "+t.quote(t.InboxTable))
	}
	return t.Exec(ctx, "ANALYZE "+t.quote(t.InboxTable))
}

// PurgeResult is one purge under load.
type PurgeResult struct {
	Deleted      int64
	Elapsed      time.Duration
	Idle, During Result
}

// Purge runs workers consumers (the inbox) for a second idle, then again while
// PurgeBatch(limit) deletes, in a loop, every key older than an hour; it returns the
// keys deleted, how long that took, and the consumers' latencies in both phases.
func Purge(ctx context.Context, t *Target, workers, limit int) (PurgeResult, error) {
	var p PurgeResult
	keys := NewKeyer()
	key := func(int) string { return keys.Next() }
	var err error
	if p.Idle, err = Run(ctx, workers, 0, time.Second, key, t.WithInbox); err != nil {
		return p, err
	}
	stop := make(chan struct{})
	var during Result
	var runErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			r, err := Run(ctx, workers, 0, 100*time.Millisecond, key, t.WithInbox)
			during.Ops += r.Ops
			during.Elapsed += r.Elapsed
			during.Latencies = append(during.Latencies, r.Latencies...)
			select {
			case <-stop:
				runErr = err
				return
			default:
			}
			if err != nil {
				runErr = err
				return
			}
		}
	})
	time.Sleep(50 * time.Millisecond)
	cutoff := time.Now().Add(-time.Hour)
	start := time.Now()
	for {
		n, err := t.Store.PurgeBatch(ctx, cutoff, limit)
		if err != nil {
			close(stop)
			wg.Wait()
			return p, err
		}
		p.Deleted += n.Keys
		if n.Keys < int64(limit) && n.Attempts < int64(limit) {
			break
		}
	}
	p.Elapsed = time.Since(start)
	close(stop)
	wg.Wait()
	slices.Sort(during.Latencies)
	p.During = during
	return p, runErr
}

// DSN returns the DSN of a flavour's database: INBOX_POSTGRES_DSN, INBOX_MARIADB_DSN or
// INBOX_MYSQL_DSN, or the local test databases (MySQL has no default).
func DSN(flavour string) (variable, dsn string) {
	const pg = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	switch flavour {
	case "pgx", "sqlpg":
		variable, dsn = "INBOX_POSTGRES_DSN", pg
	case "mariadb":
		variable, dsn = "INBOX_MARIADB_DSN", "root@tcp(127.0.0.1:3306)/test"
	case "mysql":
		variable = "INBOX_MYSQL_DSN"
	case "sqlite":
		return "INBOX_SQLITE_DIR", "(a new file)"
	}
	if v := os.Getenv(variable); v != "" {
		dsn = v
	}
	return variable, dsn
}

// Open connects to a flavour's database (20 connections), with relaxed durability when
// asked: synchronous_commit=off on PostgreSQL (a session setting), and on MariaDB and
// MySQL innodb_flush_log_at_trx_commit=2, a global setting that closing restores.
func Open(ctx context.Context, flavour string, relaxed bool) (pool *pgxpool.Pool, db *sql.DB, closeFn func(), err error) {
	variable, dsn := DSN(flavour)
	if dsn == "" {
		return nil, nil, nil, fmt.Errorf("%s is not set", variable)
	}
	switch flavour {
	case "pgx":
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", variable, err)
		}
		cfg.MaxConns = 20
		if relaxed {
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		}
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err == nil {
			if err = pool.Ping(ctx); err != nil {
				pool.Close()
			}
		}
		if err != nil {
			return nil, nil, nil, err
		}
		return pool, nil, pool.Close, nil
	case "sqlpg":
		if relaxed {
			u, err := url.Parse(dsn)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s: %w", variable, err)
			}
			q := u.Query()
			q.Set("synchronous_commit", "off")
			u.RawQuery = q.Encode()
			dsn = u.String()
		}
		db, err = sql.Open("pgx", dsn)
	case "mariadb", "mysql":
		if _, err := mysql.ParseDSN(dsn); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", variable, err)
		}
		db, err = sql.Open("mysql", dsn)
	case "sqlite":
		db, closeFn, err := openSQLite(ctx, relaxed)
		return nil, db, closeFn, err
	default:
		return nil, nil, nil, fmt.Errorf("unknown flavour %q: use pgx, sqlpg, mariadb, mysql or sqlite", flavour)
	}
	if err == nil {
		if err = db.PingContext(ctx); err != nil {
			_ = db.Close()
		}
	}
	if err != nil {
		return nil, nil, nil, err
	}
	db.SetMaxOpenConns(20)
	db.SetMaxIdleConns(20)
	closeFn = func() { _ = db.Close() }
	if relaxed && flavour != "sqlpg" {
		var old int
		if err := db.QueryRowContext(ctx, `SELECT @@GLOBAL.innodb_flush_log_at_trx_commit`).Scan(&old); err != nil {
			_ = db.Close()
			return nil, nil, nil, err
		}
		if _, err := db.ExecContext(ctx, `SET GLOBAL innodb_flush_log_at_trx_commit = 2`); err != nil {
			_ = db.Close()
			return nil, nil, nil, err
		}
		closeFn = func() {
			_, _ = db.ExecContext(context.Background(), `SET GLOBAL innodb_flush_log_at_trx_commit = `+strconv.Itoa(old))
			_ = db.Close()
		}
	}
	return nil, db, closeFn, nil
}

// Paired compares a baseline A and a candidate B under the same noise: every worker
// alternates A and B, op by op, so that a burst of load elsewhere on the machine slows
// both alike. It runs n ops of each (or, with n == 0, for d), each with a fresh key. A
// side's rate is what it would sustain alone: its ops over its summed latency divided by
// workers. Ratios holds B's rate over A's per window of the run (consecutive slices of
// about 16 ops per worker and side), whose median Ratio reports.
func Paired(ctx context.Context, workers, n int, d time.Duration, a, b Op) (AB, error) {
	type sample struct {
		at  time.Duration
		lat time.Duration
		b   bool
	}
	keys := NewKeyer()
	var next atomic.Int64
	var mu sync.Mutex
	var samples []sample
	var firstErr error
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var mine []sample
			for j := 0; ; j++ {
				i := int(next.Add(1)) - 1
				if n > 0 && i >= 2*n || n == 0 && time.Now().After(deadline) {
					break
				}
				op, isB := a, (j+w)%2 == 1
				if isB {
					op = b
				}
				t0 := time.Now()
				if err := op(ctx, keys.Next()); err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					next.Store(1 << 62)
					break
				}
				mine = append(mine, sample{at: t0.Sub(start), lat: time.Since(t0), b: isB})
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if firstErr != nil {
		return AB{}, firstErr
	}
	slices.SortFunc(samples, func(x, y sample) int { return int(x.at - y.at) })
	var ab AB
	rate := func(ops int, sum time.Duration) float64 {
		return float64(ops) / (sum.Seconds() / float64(workers))
	}
	window := max(2, 32*workers)
	var sumA, sumB, winA, winB time.Duration
	var opsA, opsB, nA, nB int
	for i, s := range samples {
		if s.b {
			ab.B.Latencies = append(ab.B.Latencies, s.lat)
			sumB += s.lat
			winB += s.lat
			opsB++
			nB++
		} else {
			ab.A.Latencies = append(ab.A.Latencies, s.lat)
			sumA += s.lat
			winA += s.lat
			opsA++
			nA++
		}
		if (i+1)%window == 0 || i == len(samples)-1 {
			if nA > 0 && nB > 0 {
				ra, rb := rate(nA, winA), rate(nB, winB)
				ab.RatesA = append(ab.RatesA, ra)
				ab.RatesB = append(ab.RatesB, rb)
				ab.Ratios = append(ab.Ratios, rb/ra)
			}
			winA, winB, nA, nB = 0, 0, 0, 0
		}
	}
	ab.A.Ops, ab.B.Ops = opsA, opsB
	ab.A.Elapsed = sumA / time.Duration(max(1, workers))
	ab.B.Elapsed = sumB / time.Duration(max(1, workers))
	slices.Sort(ab.A.Latencies)
	slices.Sort(ab.B.Latencies)
	return ab, nil
}

// Variant returns an Op running the inbox on a copy of the inbox table whose
// processed_at index is a BRIN ("brin") or absent ("noindex"), to measure what the
// B-tree costs each insert. PostgreSQL only; the copy is dropped by Drop.
func (t *Target) Variant(ctx context.Context, variant string) (Op, error) {
	if variant == "sessioniso" {
		return t.sessionIsolation(ctx)
	}
	if t.Flavour != "pgx" {
		return nil, fmt.Errorf("variant %q: pgx only", variant)
	}
	table := t.InboxTable + "_" + variant
	store, err := inbox.NewPostgresStore(t.Pool, inbox.PostgresConfig{Table: table})
	if err != nil {
		return nil, err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return nil, err
	}
	t.variants = append(t.variants, table, table+"_attempts", table+"_offsets")
	idx := pgx.Identifier{table + "_processed_at"}.Sanitize()
	q := `DROP INDEX ` + idx
	if variant == "brin" {
		q += `; CREATE INDEX ` + idx + ` ON ` + t.quote(table) + ` USING brin (processed_at)`
	}
	if err := t.Exec(ctx, q); err != nil {
		return nil, err
	}
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: t.consumer})
	if err != nil {
		return nil, err
	}
	return t.behind(ib), nil
}

// sessionIsolation is the inbox over a MySQLStore with SessionIsolation (MariaDB, MySQL):
// no SET TRANSACTION round trip before each BEGIN.
func (t *Target) sessionIsolation(ctx context.Context) (Op, error) {
	if t.Flavour != "mariadb" && t.Flavour != "mysql" {
		return nil, fmt.Errorf("variant sessioniso: mariadb and mysql only")
	}
	table := t.InboxTable + "_sessioniso"
	store, err := inbox.NewMySQLStore(t.DB, inbox.MySQLConfig{Table: table, SessionIsolation: true})
	if err != nil {
		return nil, err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return nil, err
	}
	t.variants = append(t.variants, table, table+"_attempts", table+"_offsets")
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: t.consumer})
	if err != nil {
		return nil, err
	}
	return t.behind(ib), nil
}

// ProcessedAtIndex replaces, by hand, the B-tree on the Target's inbox table's
// processed_at (the index the purge reads) with another kind: "brin" (a BRIN index,
// pages_per_range as PostgreSQL defaults it), "none", or "btree" (nothing changes).
// PostgreSQL only. It measures what the index costs each key's INSERT and the purge,
// without changing the schema the stores create (docs/benchmarks.md).
func (t *Target) ProcessedAtIndex(ctx context.Context, kind string) error {
	if kind == "" || kind == "btree" {
		return nil
	}
	if t.Flavour != "pgx" && t.Flavour != "sqlpg" {
		return fmt.Errorf("processed_at index %q: PostgreSQL only, not %s", kind, t.Flavour)
	}
	idx := pgx.Identifier{t.InboxTable + "_processed_at"}.Sanitize()
	q := `DROP INDEX ` + idx
	switch kind {
	case "brin":
		q += `; CREATE INDEX ` + idx + ` ON ` + t.quote(t.InboxTable) + ` USING brin (processed_at)`
	case "none":
	default:
		return fmt.Errorf("processed_at index %q: use btree, brin or none", kind)
	}
	return t.Exec(ctx, q)
}
