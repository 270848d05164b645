package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// mysqlServers lists the MySQL-protocol servers under test, each with its DSN variable.
func mysqlServers() []struct {
	name string
	dsn  func(t testing.TB) string
} {
	return []struct {
		name string
		dsn  func(t testing.TB) string
	}{
		{"mariadb", func(testing.TB) string { return mariaDBDSN() }},
		{"mysql", func(t testing.TB) string {
			mysqlDB(t) // skips when INBOX_MYSQL_DSN is unset
			return os.Getenv("INBOX_MYSQL_DSN")
		}},
	}
}

// TestMySQLStoreAnyDSN runs the conformance suite with the driver options that change
// what the server reports or how values come back: clientFoundRows makes a no-op update
// count as a row, parseTime and loc turn DATETIMEs into time.Time in another zone, a
// session time zone far from UTC, client-side interpolation, a case-insensitive
// connection collation.
func TestMySQLStoreAnyDSN(t *testing.T) {
	t.Parallel()
	for _, server := range mysqlServers() {
		t.Run(server.name, func(t *testing.T) {
			t.Parallel()
			dsn := withDSNParams(t, server.dsn(t), map[string]string{
				"clientFoundRows":   "true",
				"interpolateParams": "true",
				"parseTime":         "true",
				"loc":               "America/Los_Angeles",
				"time_zone":         "'+09:00'",
				"collation":         "utf8mb4_general_ci",
			})
			var zone, collation string
			require.NoError(t, openSQL(t, "mysql", dsn, server.name, "INBOX_MARIADB_DSN or INBOX_MYSQL_DSN").QueryRow("SELECT @@time_zone, @@collation_connection").Scan(&zone, &collation))
			require.Equal(t, [2]string{"+09:00", "utf8mb4_general_ci"}, [2]string{zone, collation}, "the DSN options apply")
			exerciseStore(t, mysqlFlavour(server.name, func(testing.TB) string { return dsn }, inbox.MySQLConfig{}))
		})
	}
}

// TestMySQLStoreDeadlockIsContended makes two transactions wait on each other's key:
// InnoDB kills one with error 1213, which must come back as ErrContended (retry), while
// the other claims its key.
func TestMySQLStoreDeadlockIsContended(t *testing.T) {
	t.Parallel()
	for _, server := range mysqlServers() {
		t.Run(server.name, func(t *testing.T) {
			t.Parallel()
			db := openSQL(t, "mysql", server.dsn(t), server.name, "INBOX_MARIADB_DSN or INBOX_MYSQL_DSN")
			store := newMySQLStore(t, db, inbox.MySQLConfig{})
			ctx := context.Background()
			begin := func() *sql.Tx {
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
				require.NoError(t, err)
				t.Cleanup(func() { _ = tx.Rollback() })
				return tx
			}
			a, b := begin(), begin()
			claimIn := func(tx *sql.Tx, key string) error {
				claim, err := store.ClaimIn(ctx, tx, inbox.Record{Consumer: "billing", Key: key})
				if err == nil {
					require.False(t, claim.Duplicate)
				}
				return err
			}
			require.NoError(t, claimIn(a, "k1"))
			require.NoError(t, claimIn(b, "k2"))
			errA := make(chan error, 1)
			go func() { errA <- claimIn(a, "k2") }() // waits on b
			time.Sleep(200 * time.Millisecond)
			errB := claimIn(b, "k1") // waits on a: a cycle, one of them is the victim
			if errB == nil {
				require.NoError(t, b.Rollback()) // let a go on, if a was the victim it is done already
			}
			err := <-errA
			victims := 0
			for _, err := range []error{err, errB} {
				if err != nil {
					victims++
					require.ErrorIs(t, err, inbox.ErrContended)
					require.NotErrorIs(t, err, inbox.ErrNoTable)
				}
			}
			require.Equal(t, 1, victims, "InnoDB kills exactly one of the two")
		})
	}
}

// TestMySQLStoreLockTimeoutRestoresSession checks that the store's LockTimeout applies to
// the inbox statement only: the session's own innodb_lock_wait_timeout is back after a
// claim, whether the claim got the key or timed out.
func TestMySQLStoreLockTimeoutRestoresSession(t *testing.T) {
	t.Parallel()
	for _, server := range mysqlServers() {
		t.Run(server.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openSQL(t, "mysql", server.dsn(t), server.name, "INBOX_MARIADB_DSN or INBOX_MYSQL_DSN")
			conn, err := db.Conn(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			_, err = conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 7")
			require.NoError(t, err)
			table := tableName("inbox")
			newMySQLStore(t, db, inbox.MySQLConfig{Table: table})
			store, err := inbox.NewMySQLStore(conn, inbox.MySQLConfig{Table: table, LockTimeout: 300 * time.Millisecond})
			require.NoError(t, err)
			sessionTimeout := func() int {
				var n int
				require.NoError(t, conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&n))
				return n
			}

			claim, err := store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "k1"})
			require.NoError(t, err)
			require.NoError(t, claim.Tx.Commit(ctx, nil))
			require.Equal(t, 7, sessionTimeout(), "after a claim")

			holder, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = holder.Rollback() })
			_, err = holder.ExecContext(ctx, "INSERT INTO `"+table+"` (`consumer`, `key`) VALUES ('billing', 'k2')")
			require.NoError(t, err)
			_, err = store.Claim(ctx, inbox.Record{Consumer: "billing", Key: "k2"})
			require.ErrorIs(t, err, inbox.ErrContended, "1205 lock wait timeout")
			require.Equal(t, 7, sessionTimeout(), "after a timed-out claim")
		})
	}
}

func TestMySQLSchema(t *testing.T) {
	t.Parallel()
	ddl, err := inbox.MySQLSchema("orders_inbox")
	require.NoError(t, err)
	require.Contains(t, ddl, "CREATE TABLE IF NOT EXISTS `orders_inbox` (")
	require.Contains(t, ddl, "CREATE TABLE IF NOT EXISTS `orders_inbox_attempts` (")
	require.Contains(t, ddl, "INDEX `orders_inbox_processed_at`")
	require.Contains(t, ddl, "CREATE TABLE IF NOT EXISTS `orders_inbox_offsets` (")
	require.Contains(t, ddl, "CREATE TABLE IF NOT EXISTS `orders_inbox_schema` (") // the version (ADR 134)
	require.NotContains(t, ddl, "`inbox")
	require.Equal(t, 4, strings.Count(ddl, "CREATE TABLE"))

	_, err = inbox.MySQLSchema("orders`; DROP TABLE x")
	require.Error(t, err)
}

func TestMySQLStoreConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		db   inbox.SQLDB
		cfg  inbox.MySQLConfig
		want string
	}{
		{name: "nil db", cfg: inbox.MySQLConfig{}, want: "db is nil"},
		{name: "bad table", db: &sql.DB{}, cfg: inbox.MySQLConfig{Table: "in box"}, want: "not a valid table name"},
		{name: "negative lock timeout", db: &sql.DB{}, cfg: inbox.MySQLConfig{LockTimeout: -time.Second}, want: "LockTimeout"},
		{name: "both isolation choices", db: &sql.DB{}, cfg: inbox.MySQLConfig{Isolation: sql.LevelSerializable, SessionIsolation: true}, want: "choose one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := inbox.NewMySQLStore(tt.db, tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestSQLStoresReportCancellation checks the reading of sql.ErrTxDone: a context
// cancelled under the handler is a cancellation, not ErrTxDone.
func TestSQLStoresReportCancellation(t *testing.T) {
	t.Parallel()
	for _, f := range []storeFlavour{sqlPostgresFlavour(), mysqlFlavour("mariadb", mariaDBDSNOf, inbox.MySQLConfig{})} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			fx := f.open(t, storeOpts{})
			ib := newTestInbox(t, fx.store, inbox.Config{})
			ctx, cancel := context.WithCancel(context.Background())
			_, err := ib.Process(ctx, "billing", "order-1", func(txCtx context.Context) error {
				cancel()
				return nil
			})
			require.ErrorIs(t, err, context.Canceled)
			require.False(t, errors.Is(err, inbox.ErrTxDone), "a cancellation is not the handler ending the tx: %v", err)
		})
	}
}

// TestMySQLStoreDuplicateKeepsJoinedTx checks that error 1062 undoes the insert only: a
// duplicate claimed in the caller's transaction leaves its earlier writes in place.
func TestMySQLStoreDuplicateKeepsJoinedTx(t *testing.T) {
	t.Parallel()
	for _, server := range mysqlServers() {
		t.Run(server.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openSQL(t, "mysql", server.dsn(t), server.name, "INBOX_MARIADB_DSN or INBOX_MYSQL_DSN")
			store := newMySQLStore(t, db, inbox.MySQLConfig{})
			l := newSQLLedger(t, db, true)
			rec := inbox.Record{Consumer: "billing", Key: "order-1", Fingerprint: []byte("fp")}
			claim, err := store.Claim(ctx, rec)
			require.NoError(t, err)
			require.NoError(t, claim.Tx.Commit(ctx, []byte("out")))

			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, l.credit(inbox.ContextWithTx(ctx, tx), 5))
			claim, err = store.ClaimIn(ctx, tx, rec)
			require.NoError(t, err)
			require.True(t, claim.Duplicate)
			require.Equal(t, []byte("fp"), claim.Fingerprint)
			require.Equal(t, []byte("out"), claim.Output)
			require.NoError(t, l.credit(inbox.ContextWithTx(ctx, tx), 7))
			require.NoError(t, tx.Commit())
			total, credits := l.balance(t)
			require.Equal(t, [2]int{12, 2}, [2]int{total, credits})
		})
	}
}
