package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" database/sql driver (cgo)
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver (pure Go)

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// The SQLite flavours of the conformance suite: sqlitestore.Store on a database file of
// the test's own, through modernc.org/sqlite and through
// github.com/mattn/go-sqlite3. No server is needed: they never skip.

// sqliteSessionLock is every SQLite test connection's busy_timeout (ms), set in the DSN:
// neither driver's default (0 for modernc, 5000 for mattn), nor DSN's.
const (
	sqliteSessionLock = "41000"
	sqliteOwnedLock   = "2345"
)

var sqliteLockProbe = lockProbe{
	session: sqliteSessionLock, owned: sqliteOwnedLock,
	set: func(ctx context.Context, tx any, value string) error {
		return execIn(ctx, tx, `PRAGMA busy_timeout = `+value)
	},
	read: func(ctx context.Context, tx any) (string, error) { return queryIn(ctx, tx, `PRAGMA busy_timeout`) },
}

// sqliteDSNs: the DSN of a file at path for a driver, with the non-default busy_timeout.
var (
	// moderncDSN is what sqlitestore.DSN sets (WAL, BEGIN IMMEDIATE), busy_timeout aside.
	moderncDSN = func(path string) string {
		return "file:" + path + "?_pragma=busy_timeout(" + sqliteSessionLock + ")&_pragma=journal_mode(WAL)&_txlock=immediate"
	}
	// moderncSessionDSN is a session unlike the store's advice: deferred transactions, a
	// rollback journal, no fsync, foreign keys and case-sensitive LIKE on, double-quoted
	// strings refused, times written as SQLite text and integers and text read back as
	// times where the driver can.
	moderncSessionDSN = func(path string) string {
		return "file:" + path + "?_pragma=busy_timeout(" + sqliteSessionLock + ")&_pragma=journal_mode(DELETE)&_pragma=synchronous(OFF)" +
			"&_pragma=foreign_keys(1)&_pragma=case_sensitive_like(1)&_pragma=recursive_triggers(1)&_dqs=0" +
			"&_time_format=sqlite&_inttotime=1&_texttotime=1&_txlock=deferred"
	}
	mattnDSN = func(path string) string {
		return "file:" + path + "?_busy_timeout=" + sqliteSessionLock + "&_journal_mode=WAL&_txlock=immediate"
	}
)

// sqliteDriver is one driver and the DSN it is opened with in a flavour.
type sqliteDriver struct {
	name string // database/sql driver name
	dsn  func(path string) string
	// immediate: the DSN's transactions take the write lock at BEGIN.
	immediate bool
}

var (
	modernc        = sqliteDriver{name: "sqlite", dsn: moderncDSN, immediate: true}
	moderncSession = sqliteDriver{name: "sqlite", dsn: moderncSessionDSN}
	mattn          = sqliteDriver{name: "sqlite3", dsn: mattnDSN, immediate: true}
)

// sqliteCaps: SQLite has one writer per database (see caps.oneWriter).
// An embedded database has no connection to break: the fault axis does not apply.
var sqliteCaps = caps{oneWriter: true, noNetwork: true}

func sqliteFlavour(name string, d sqliteDriver, handle handleKind) storeFlavour {
	return storeFlavour{
		name: name,
		caps: sqliteCaps,
		open: func(t *testing.T, opts storeOpts) fixture {
			return sqliteFixture(t, d, handle, opts)
		},
		creators: sqliteCreators(d, handle),
		missing: func(t *testing.T) inbox.Store {
			store, err := sqlitestore.New(sqliteDB(t, d, sqlitePath(t, d)), sqlitestore.Config{Table: tableName("missing")})
			require.NoError(t, err)
			return store
		},
	}
}

// sqlitePath returns a database file in the test's temporary directory.
func sqlitePath(t testing.TB, _ sqliteDriver) string {
	return filepath.Join(t.TempDir(), "inbox.db")
}

// sqliteDB opens the database at path with d, closed when the test ends.
func sqliteDB(t testing.TB, d sqliteDriver, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.name, d.dsn(path))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(context.Background()))
	return db
}

// sqliteFixture is sqlitestore.Store over a *sql.DB or one of its connections, on a
// database of the test's own.
func sqliteFixture(t *testing.T, d sqliteDriver, handle handleKind, opts storeOpts) fixture {
	path := sqlitePath(t, d)
	open := func(t testing.TB) *sql.DB { return sqliteDB(t, d, path) }
	db := open(t)
	cfg := sqlitestore.Config{Table: tableName("inbox"), LockTimeout: opts.lockTimeout}
	newStore := func(t *testing.T, handle inbox.SQLDB) inbox.Store {
		store, err := sqlitestore.New(handle, cfg)
		require.NoError(t, err)
		return store
	}
	store, err := sqlitestore.New(db, cfg)
	require.NoError(t, err)
	require.NoError(t, store.CreateSchema(context.Background()))
	fx := fixture{
		store: store, handle: handle, ledger: newSQLiteLedger(t, db), lock: sqliteLockProbe,
		peer:           func(*testing.T) inbox.Store { return store },
		begin:          sqlBegin(db),
		beginOther:     func(t *testing.T) (any, func(bool) error) { return sqlBegin(open(t))(t) },
		beginTakesLock: d.immediate,
	}
	if handle == oneSQLConn {
		conn := sqlConn(t, db)
		fx.store = newStore(t, conn)
		fx.begin = sqlBegin(conn)
		fx.peer = func(t *testing.T) inbox.Store { return newStore(t, sqlConn(t, db)) }
	}
	return fx
}

// newSQLiteLedger creates a ledger table on db.
func newSQLiteLedger(t testing.TB, db *sql.DB) sqlLedger {
	t.Helper()
	l := sqlLedger{db: db, table: fmt.Sprintf("%q", tableName("ledger"))}
	l.insert = `INSERT INTO ` + l.table + ` (amount) VALUES (?)`
	_, err := db.Exec(`CREATE TABLE ` + l.table + ` (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)`)
	require.NoError(t, err)
	return l
}
