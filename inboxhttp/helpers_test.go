package inboxhttp_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// The tests run on real PostgreSQL (pgx), MariaDB and SQLite (a file), each request through a real server
// on loopback and a real client. Outside CI a database that cannot be reached skips its
// tests, naming the variable to set; under CI (CI=true) it fails them.

// testDSN is the DSN of the test database named so in sqltest.Databases
// ("postgres", "mariadb"): the environment's, or the local default.
func testDSN(name string) string {
	for _, d := range sqltest.Databases() {
		if d.Name == name {
			return d.DSN
		}
	}
	panic("no test database " + name)
}

var backendNames = []string{"pgx", "mariadb", "sqlite"}

// backend is one database with an inbox table and a ledger table that handlers credit
// through the inbox transaction.
type backend struct {
	name          string
	store         inbox.Store
	table, ledger string
	credit        func(ctx context.Context, amount int) error
	pool          *pgxpool.Pool // pgx only
	balance       func(t testing.TB) (total, credits int)
	// readTx, set on a database with one writer at a time (SQLite), begins a
	// transaction that only reads: one of the application's that does not hold the
	// write lock the middleware's own transaction needs.
	readTx func(t testing.TB) *sql.Tx
}

// openBackend opens the named database on the given tables, creating them (and dropping
// them when the test ends) when create is set. A pgx pool gets cfg's tracer and dialer.
func openBackend(t testing.TB, name, table, ledger string, create bool, tweak func(*pgxpool.Config), mysqlDSN string) backend {
	t.Helper()
	ctx := context.Background()
	b := backend{name: name, table: table, ledger: ledger}
	switch name {
	case "pgx":
		cfg, err := pgxpool.ParseConfig(testDSN("postgres"))
		require.NoError(t, err)
		cfg.MaxConns = 20
		if tweak != nil {
			tweak(cfg)
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			err = pool.Ping(ctx)
		}
		if err != nil {
			sqltest.Unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
		}
		t.Cleanup(pool.Close)
		store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
		require.NoError(t, err)
		lt := pgx.Identifier{ledger}.Sanitize()
		if create {
			require.NoError(t, store.CreateSchema(ctx))
			_, err = pool.Exec(ctx, `CREATE TABLE `+lt+` (id serial PRIMARY KEY, amount int NOT NULL)`)
			require.NoError(t, err)
			t.Cleanup(func() {
				_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+lt+`, `+pgx.Identifier{table}.Sanitize()+`, `+pgx.Identifier{table + "_attempts"}.Sanitize()+`, `+pgx.Identifier{table + "_offsets"}.Sanitize())
			})
		}
		b.store, b.pool = store, pool
		b.credit = func(ctx context.Context, amount int) error {
			tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
			if !ok {
				return fmt.Errorf("no pgx.Tx in the request context")
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+lt+` (amount) VALUES ($1)`, amount)
			return err
		}
		b.balance = func(t testing.TB) (total, credits int) {
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT coalesce(sum(amount), 0), count(*) FROM `+lt).Scan(&total, &credits))
			return total, credits
		}
	case "mariadb":
		dsn := mysqlDSN
		if dsn == "" {
			dsn = testDSN("mariadb")
		}
		db, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		db.SetMaxOpenConns(20)
		db.SetMaxIdleConns(20)
		t.Cleanup(func() { _ = db.Close() })
		if err := db.PingContext(ctx); err != nil {
			sqltest.Unavailable(t, "MariaDB", "INBOX_MARIADB_DSN", err)
		}
		store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table})
		require.NoError(t, err)
		lt := "`" + ledger + "`"
		if create {
			require.NoError(t, store.CreateSchema(ctx))
			_, err = db.Exec("CREATE TABLE " + lt + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, amount INT NOT NULL) ENGINE=InnoDB")
			require.NoError(t, err)
			t.Cleanup(func() {
				_, _ = db.Exec("DROP TABLE IF EXISTS " + lt + ", `" + table + "`, `" + table + "_attempts`, `" + table + "_offsets`")
			})
		}
		b.store = store
		b.credit = func(ctx context.Context, amount int) error {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			if !ok {
				return fmt.Errorf("no *sql.Tx in the request context")
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO "+lt+" (amount) VALUES (?)", amount)
			return err
		}
		b.balance = func(t testing.TB) (total, credits int) {
			require.NoError(t, db.QueryRow("SELECT COALESCE(SUM(amount), 0), COUNT(*) FROM "+lt).Scan(&total, &credits))
			return total, credits
		}
	case "sqlite":
		// A file named after the table, so that a helper process given the same names
		// opens the same database.
		path := filepath.Join(os.TempDir(), "inboxhttp-"+table+".db")
		db, err := sql.Open("sqlite", sqlitestore.DSN(path))
		require.NoError(t, err)
		db.SetMaxOpenConns(20)
		t.Cleanup(func() { _ = db.Close() })
		store, err := sqlitestore.New(db, sqlitestore.Config{Table: table})
		require.NoError(t, err)
		lt := `"` + ledger + `"`
		if create {
			require.NoError(t, store.CreateSchema(ctx))
			_, err = db.Exec(`CREATE TABLE ` + lt + ` (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)`)
			require.NoError(t, err)
			t.Cleanup(func() {
				for _, suffix := range []string{"", "-wal", "-shm"} {
					_ = os.Remove(path + suffix)
				}
			})
		}
		b.store = store
		b.readTx = func(t testing.TB) *sql.Tx {
			tx, err := db.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true}) // deferred: no write lock
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback() })
			_, err = tx.Exec(`SELECT count(*) FROM ` + lt)
			require.NoError(t, err)
			return tx
		}
		b.credit = func(ctx context.Context, amount int) error {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			if !ok {
				return fmt.Errorf("no *sql.Tx in the request context")
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO `+lt+` (amount) VALUES (?)`, amount)
			return err
		}
		b.balance = func(t testing.TB) (total, credits int) {
			require.NoError(t, db.QueryRow(`SELECT COALESCE(SUM(amount), 0), COUNT(*) FROM `+lt).Scan(&total, &credits))
			return total, credits
		}
	default:
		t.Fatalf("no backend %q", name)
	}
	return b
}

func newBackend(t testing.TB, name string) backend {
	return openBackend(t, name, sqltest.Name("inbox"), sqltest.Name("ledger"), true, nil, "")
}

// newMiddleware returns the middleware over b with cfg (Inbox and Consumer filled in).
func newMiddleware(t testing.TB, b backend, cfg inboxhttp.Config) *inboxhttp.Idempotency {
	t.Helper()
	if cfg.Inbox == nil {
		ib, err := inbox.New(inbox.Config{Store: b.store, Consumer: "http"})
		require.NoError(t, err)
		cfg.Inbox = ib
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "POST /payments"
	}
	m, err := inboxhttp.New(cfg)
	require.NoError(t, err)
	return m
}

// reply is a response as the client got it.
type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// post sends a POST with the key (as a structured-field string unless it is empty) and
// returns what came back.
func post(t testing.TB, client *http.Client, url, key, body string) (reply, error) {
	t.Helper()
	return do(client, newPost(t, url, key, body))
}

// postRetry is post marked as the client's retry (retryHeader).
func postRetry(t testing.TB, client *http.Client, url, key, body string) (reply, error) {
	t.Helper()
	req := newPost(t, url, key, body)
	req.Header.Set(retryHeader, "1")
	return do(client, req)
}

func newPost(t testing.TB, url, key, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", `"`+key+`"`)
	}
	return req
}

// retryHeader marks a test client's retries, which isRetry reads (Config.ReplayHint).
const retryHeader = "X-Retry-Count"

func isRetry(r *http.Request) bool { return r.Header.Get(retryHeader) != "" }

func do(client *http.Client, req *http.Request) (reply, error) {
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}
