package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// Helpers of the database/sql stores: SQLPostgresStore on pgx's stdlib driver, and
// MySQLStore on MariaDB and on MySQL.

const defaultMariaDBDSN = "root@tcp(127.0.0.1:3306)/test"

func mariaDBDSN() string {
	if dsn := os.Getenv("INBOX_MARIADB_DSN"); dsn != "" {
		return dsn
	}
	return defaultMariaDBDSN
}

// openSQL opens a *sql.DB, pings it, and closes it when the test ends.
func openSQL(t testing.TB, driver, dsn, what, variable string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("%s: %v", variable, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		unavailable(t, what, variable, err)
	}
	return db
}

// sqlPostgresDB returns a database/sql handle on the test PostgreSQL (pgx stdlib driver).
func sqlPostgresDB(t testing.TB) *sql.DB {
	return openSQL(t, "pgx", postgresDSN(), "PostgreSQL", "INBOX_POSTGRES_DSN")
}

// mariaDB returns a handle on the test MariaDB.
func mariaDB(t testing.TB) *sql.DB {
	return openSQL(t, "mysql", mariaDBDSN(), "MariaDB", "INBOX_MARIADB_DSN")
}

// mysqlDB returns a handle on the test MySQL. INBOX_MYSQL_DSN has no default: .ci/run sets
// it when it could start MySQL, and its tests skip when it is unset, CI or not.
func mysqlDB(t testing.TB) *sql.DB {
	dsn := os.Getenv("INBOX_MYSQL_DSN")
	if dsn == "" {
		t.Skip("MySQL not tested: set INBOX_MYSQL_DSN (e.g. root@tcp(127.0.0.1:3307)/test; .ci/run sets it when scripts/mysql-sid.sh started MySQL)")
	}
	return openSQL(t, "mysql", dsn, "MySQL", "INBOX_MYSQL_DSN")
}

// withDSNParams returns dsn (of go-sql-driver/mysql) with params added.
func withDSNParams(t testing.TB, dsn string, params map[string]string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	for k, v := range params {
		switch k {
		case "clientFoundRows":
			cfg.ClientFoundRows = v == "true"
		case "interpolateParams":
			cfg.InterpolateParams = v == "true"
		case "parseTime":
			cfg.ParseTime = v == "true"
		case "loc":
			loc, err := time.LoadLocation(v)
			require.NoError(t, err)
			cfg.Loc = loc
		default:
			cfg.Params[k] = v
		}
	}
	return cfg.FormatDSN()
}

// newSQLPostgresStore returns a SQLPostgresStore on fresh tables, dropped when the test ends.
func newSQLPostgresStore(t testing.TB, db *sql.DB, cfg inbox.SQLPostgresConfig) *inbox.SQLPostgresStore {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = tableName("inbox")
	}
	store, err := inbox.NewSQLPostgresStore(db, cfg)
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(context.Background()))
	t.Cleanup(func() {
		_, _ = db.Exec(fmt.Sprintf(`DROP TABLE IF EXISTS %q, %q, %q, %q`, cfg.Table, cfg.Table+"_attempts", cfg.Table+"_offsets", cfg.Table+"_schema"))
	})
	return store
}

// newMySQLStore returns a MySQLStore on fresh tables, dropped when the test ends.
func newMySQLStore(t testing.TB, db *sql.DB, cfg inbox.MySQLConfig) *inbox.MySQLStore {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = tableName("inbox")
	}
	store, err := inbox.NewMySQLStore(db, cfg)
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(context.Background()))
	t.Cleanup(func() {
		_, _ = db.Exec(fmt.Sprintf("DROP TABLE IF EXISTS `%s`, `%s`, `%s`, `%s`", cfg.Table, cfg.Table+"_attempts", cfg.Table+"_offsets", cfg.Table+"_schema"))
	})
	return store
}

// sqlLedger is a table of credits written through the inbox's *sql.Tx.
type sqlLedger struct {
	db     *sql.DB
	table  string
	insert string
}

// newSQLLedger creates a ledger table; mysql says which dialect to speak.
func newSQLLedger(t testing.TB, db *sql.DB, mysql bool) sqlLedger {
	t.Helper()
	name := tableName("ledger")
	l := sqlLedger{db: db, table: fmt.Sprintf("%q", name)}
	create := `CREATE TABLE ` + l.table + ` (id serial PRIMARY KEY, amount int NOT NULL)`
	l.insert = `INSERT INTO ` + l.table + ` (amount) VALUES ($1)`
	if mysql {
		l.table = "`" + name + "`"
		create = "CREATE TABLE " + l.table + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, amount INT NOT NULL) ENGINE=InnoDB"
		l.insert = "INSERT INTO " + l.table + " (amount) VALUES (?)"
	}
	_, err := db.Exec(create)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS ` + l.table) })
	return l
}

// credit adds amount through the inbox transaction in ctx.
func (l sqlLedger) credit(ctx context.Context, amount int) error {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok {
		return fmt.Errorf("no *sql.Tx in the context")
	}
	_, err := tx.ExecContext(ctx, l.insert, amount)
	return err
}

// balance returns the committed total and the number of credits.
func (l sqlLedger) balance(t testing.TB) (total, credits int) {
	t.Helper()
	err := l.db.QueryRow(`SELECT COALESCE(SUM(amount), 0), COUNT(*) FROM `+l.table).Scan(&total, &credits)
	require.NoError(t, err)
	return total, credits
}
