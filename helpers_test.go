package inbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
)

// Tests run against real databases. Outside CI a database that cannot be reached skips
// its tests, naming the variable to set; under CI (CI=true) it fails them.

const defaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func postgresDSN() string {
	if dsn := os.Getenv("INBOX_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return defaultPostgresDSN
}

// unavailable fails the test under CI and skips it elsewhere.
func unavailable(t testing.TB, what, variable string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable (set %s): %v", what, variable, err)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// pgPool returns a pool on the test PostgreSQL, closed when the test ends.
func pgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(postgresDSN())
	if err != nil {
		t.Fatalf("INBOX_POSTGRES_DSN: %v", err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// tableName returns a fresh table name for one test, so tests can run in parallel.
func tableName(prefix string) string {
	return fmt.Sprintf("%s_%d_%08x", prefix, time.Now().UnixNano()%1e6, rand.Uint32())
}

// newPgxStore returns a PostgresStore on fresh tables, dropped when the test ends.
func newPgxStore(t testing.TB, pool *pgxpool.Pool, cfg inbox.PostgresConfig) *inbox.PostgresStore {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = tableName("inbox")
	}
	store, err := inbox.NewPostgresStore(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s, %s`,
			pgx.Identifier{cfg.Table}.Sanitize(), pgx.Identifier{cfg.Table + "_attempts"}.Sanitize(), pgx.Identifier{cfg.Table + "_offsets"}.Sanitize(), pgx.Identifier{cfg.Table + "_schema"}.Sanitize()))
	})
	return store
}

// pgLedger is a table of credits written through the inbox transaction.
type pgLedger struct {
	pool  *pgxpool.Pool
	table string
	// write, when set, is the name the handler writes to instead of table: unqualified,
	// found through the transaction's search_path.
	write string
}

func newPgLedger(t testing.TB, pool *pgxpool.Pool) pgLedger {
	t.Helper()
	l := pgLedger{pool: pool, table: pgx.Identifier{tableName("ledger")}.Sanitize()}
	if _, err := pool.Exec(context.Background(), `CREATE TABLE `+l.table+` (id serial PRIMARY KEY, amount int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+l.table) })
	return l
}

// credit adds amount through the inbox transaction in ctx.
func (l pgLedger) credit(ctx context.Context, amount int) error {
	tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
	if !ok {
		return fmt.Errorf("no pgx.Tx in the context")
	}
	table := l.table
	if l.write != "" {
		table = l.write
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+table+` (amount) VALUES ($1)`, amount)
	return err
}

// balance returns the committed total and the number of credits.
func (l pgLedger) balance(t testing.TB) (total, credits int) {
	t.Helper()
	err := l.pool.QueryRow(context.Background(), `SELECT coalesce(sum(amount), 0), count(*) FROM `+l.table).Scan(&total, &credits)
	if err != nil {
		t.Fatal(err)
	}
	return total, credits
}
