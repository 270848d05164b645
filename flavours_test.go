package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
	"github.com/watermill-inbox/inbox/redisstore"
)

// storeFlavours lists every store the conformance suite runs against: each store over
// each kind of handle it takes, and over sessions whose settings are not the server's
// defaults.
func storeFlavours() []storeFlavour {
	return []storeFlavour{
		pgxFlavour(),
		pgxConnFlavour(),
		pgxSessionFlavour(),
		sqlPostgresFlavour(),
		sqlPostgresConnFlavour(),
		mysqlFlavour("mariadb", mariaDBDSNOf, inbox.MySQLConfig{}),
		// REPEATABLE READ, the session's level: the same verdicts, one round trip less.
		mysqlFlavour("mariadb-session-isolation", mariaDBDSNOf, inbox.MySQLConfig{SessionIsolation: true}),
		mysqlConnFlavour("mariadb-conn", mariaDBDSNOf),
		mysqlFlavour("mariadb-session-settings", mariaDBSessionSettings, inbox.MySQLConfig{}),
		mysqlFlavour("mysql", mysqlDSNOf, inbox.MySQLConfig{}),
		mysqlConnFlavour("mysql-conn", mysqlDSNOf),
		vitessFlavour(), // sharded keyspace, two-phase commit: helpers_distsql_test.go
		mysqlFlavour("tidb", tidbDSNOf, inbox.MySQLConfig{Engine: inbox.MySQLTiDB}),
		mysqlFlavour("tidb-repeatable-read", tidbDSNOf, inbox.MySQLConfig{Engine: inbox.MySQLTiDB, Isolation: sql.LevelRepeatableRead}),
		redisFlavour(),
		redisClusterFlavour(),
		// SQLite (sqlitestore): helpers_sqlite_test.go.
		sqliteFlavour("sqlite", modernc, pooled),
		sqliteFlavour("sqlite-conn", modernc, oneSQLConn),
		sqliteFlavour("sqlite-session-settings", moderncSession, pooled),
		sqliteFlavour("sqlite-mattn", mattn, pooled),
		// Through PgBouncer in transaction pooling mode: flavours_pgbouncer_test.go.
		pgbouncerPgxFlavour("pgbouncer-pgx-exec", pooled, "exec"),
		pgbouncerPgxFlavour("pgbouncer-pgx-simple", pooled, "simple_protocol"),
		pgbouncerPgxFlavour("pgbouncer-pgx-conn-exec", onePgxConn, "exec"),
		pgbouncerSQLFlavour("pgbouncer-sqlpostgres-exec", pooled, "exec"),
		// A TenantStore in front of a store per tenant: flavours_tenants_test.go.
		tenantFlavour("tenants-pgx-databases"),
		tenantFlavour("tenants-pgx-schemas"),
		tenantFlavour("tenants-sqlpostgres-schemas"),
		tenantFlavour("tenants-mariadb-databases"),
		tenantFlavour("tenants-redis-prefixes"),
		tenantFlavour("tenants-pgbouncer-schemas"),
	}
}

// storeFlavour is one store implementation under the suite.
type storeFlavour struct {
	name string
	// open returns a fixture on tables of its own, dropped when the test ends.
	open func(t *testing.T, opts storeOpts) fixture
	// missing returns a store whose table does not exist.
	missing func(t *testing.T) inbox.Store
	// caps declares what the store cannot do; the cases it cannot apply are skipped.
	caps caps
	// creators returns n stores on one fresh table (or, for a TenantStore, fresh
	// tenants' tables), each over a handle of its own, with no table created yet:
	// ConcurrentCreateSchema races them (flavours_schema_test.go).
	creators func(t *testing.T, n int) []inbox.Store
	// tenant, when set, is the tenant the cases run as, in their context and their
	// messages' metadata: the store routes by tenant (helpers_tenants_test.go).
	tenant string
}

// caps lists what a store lacks, so that the zero value is a full SQL store.
type caps struct {
	noJoin              bool // no transaction of the caller's to join: ClaimIn fails
	noPurge             bool // keys expire by themselves: PurgeBatch deletes nothing
	noSchema            bool // no tables: Verify never reports ErrNoTable
	noSession           bool // no database session whose settings LockTimeout could change
	handlerCannotCommit bool // a handler ending its handle commits nothing, key included
	noNeighbours        bool // no cheap look at other consumers' names: no ConsumerNeighbours
	noAttemptCount      bool // no count of unfinished attempts per consumer: no AttemptCounter
	noNetwork           bool // no network connection to break (an embedded database): no fault axis
	// attemptsRefused: behind a pooler that moves transactions (PgBouncer in transaction
	// mode) the store refuses MaxAttempts with ErrAttemptsBehindPooler (ADR 96): the
	// cases that count attempts check that refusal instead (skipRefusedAttempts).
	attemptsRefused bool
	// oneWriter: one write transaction at a time per database (SQLite): a transaction
	// the inbox joins holds, or will take, the only write lock, so attempts cannot be
	// counted beside it (ErrAttemptsNeedConn).
	oneWriter bool
	noBatch   bool // ProcessBatch is refused with errors.ErrUnsupported
	noOffsets bool // offset mode is refused: ProcessOffsets with errors.ErrUnsupported, Config.Position by New
	// purgeTurnRefused is the error a purge turn (inbox.PurgeTurns) is refused with: a
	// handle that cannot lend a connection of its own (a MySQL *sql.Conn:
	// errors.ErrUnsupported), a pooler in transaction mode (ErrPurgeTurnBehindPooler).
	purgeTurnRefused error
}

type storeOpts struct {
	lockTimeout time.Duration
	// faults dials the store's connections, and its peers', through fixture.faults.
	faults bool
	// lookup, for the tenant flavours, runs each TenantConfig.Lookup of the TenantStore
	// around open, which opens the tenant's store as the flavour does: a case makes a
	// Lookup fail, panic or hang (conformance_tenants_test.go). Nil: open alone.
	lookup func(ctx context.Context, tenant string, open func() (inbox.Tenant, error)) (inbox.Tenant, error)
	// openTimeout is the tenant flavours' TenantConfig.OpenTimeout; 0 for the default.
	openTimeout time.Duration
}

// handleKind is what a store runs on.
type handleKind int

const (
	pooled     handleKind = iota // *pgxpool.Pool, *sql.DB
	onePgxConn                   // *pgx.Conn
	oneSQLConn                   // *sql.Conn
)

type fixture struct {
	store  inbox.Store
	handle handleKind
	ledger ledger
	// peer returns a store on the same tables over a handle of its own, for a
	// concurrent delivery: the store itself over a pool, another connection otherwise.
	peer func(t *testing.T) inbox.Store
	// begin begins a transaction of the store's own type on the store's handle (on its
	// very connection, for one-connection handles); beginOther on another handle (a
	// pool or *sql.DB of its own) to the same database. end commits or rolls back.
	begin, beginOther func(t *testing.T) (tx any, end func(commit bool) error)
	// lock reads and sets the lock wait bound of a transaction's session.
	lock lockProbe
	// faults breaks the store's connections at a delivery's steps; set when opened
	// with storeOpts.faults (flavours_faults_test.go).
	faults *netFaults
	// beginTakesLock: begin and beginOther take the database's write lock at BEGIN
	// (SQLite with _txlock=immediate), so they wait for a writer that holds it.
	beginTakesLock bool
	// ledgerIn, for the tenant flavours, returns a ledger in tenant's database, schema
	// or prefix, which a handler running in that tenant credits: created on demand, so
	// that the cases of one tenant keep failing when routed elsewhere. caseTenant's is
	// ledger.
	ledgerIn func(t *testing.T, tenant string) ledger
}

// lockProbe reads and sets the session setting LockTimeout changes: lock_timeout on
// PostgreSQL, innodb_lock_wait_timeout on MySQL.
type lockProbe struct {
	// session is every connection's own value, set at connect, never the server's default.
	session string
	// owned is a value an owner sets in its own transaction before the inbox joins it.
	owned string
	set   func(ctx context.Context, tx any, value string) error
	read  func(ctx context.Context, tx any) (string, error)
}

// sessionLockTimeout and ownedLockTimeout are the non-default values the probes use.
const (
	pgSessionLock = "41s"
	pgOwnedLock   = "2345ms"
	mySessionLock = "41"
	myOwnedLock   = "7"
)

var pgLockProbe = lockProbe{
	session: pgSessionLock, owned: pgOwnedLock,
	set: func(ctx context.Context, tx any, value string) error {
		return execIn(ctx, tx, `SET LOCAL lock_timeout = '`+value+`'`)
	},
	read: func(ctx context.Context, tx any) (string, error) { return queryIn(ctx, tx, `SHOW lock_timeout`) },
}

var myLockProbe = lockProbe{
	session: mySessionLock, owned: myOwnedLock,
	set: func(ctx context.Context, tx any, value string) error {
		return execIn(ctx, tx, `SET SESSION innodb_lock_wait_timeout = `+value)
	},
	read: func(ctx context.Context, tx any) (string, error) {
		return queryIn(ctx, tx, `SELECT @@SESSION.innodb_lock_wait_timeout`)
	},
}

// execIn runs a statement in a pgx.Tx or *sql.Tx.
func execIn(ctx context.Context, tx any, query string) error {
	switch tx := tx.(type) {
	case pgx.Tx:
		_, err := tx.Exec(ctx, query)
		return err
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, query)
		return err
	}
	return fmt.Errorf("not a transaction: %T", tx)
}

// queryIn reads one text value in a pgx.Tx or *sql.Tx.
func queryIn(ctx context.Context, tx any, query string) (string, error) {
	var v string
	switch tx := tx.(type) {
	case pgx.Tx:
		return v, tx.QueryRow(ctx, query).Scan(&v)
	case *sql.Tx:
		return v, tx.QueryRowContext(ctx, query).Scan(&v)
	}
	return "", fmt.Errorf("not a transaction: %T", tx)
}

// pgDSN is the test PostgreSQL's DSN with session settings added as run-time
// parameters: lock_timeout always, so that no test compares with the server default.
func pgDSN(t testing.TB, settings map[string]string) string {
	t.Helper()
	u, err := url.Parse(postgresDSN())
	require.NoError(t, err)
	q := u.Query()
	q.Set("lock_timeout", pgSessionLock)
	for k, v := range settings {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// pgPoolWith returns a pool on dsn, closed when the test ends.
func pgPoolWith(t testing.TB, dsn string) *pgxpool.Pool { return pgPoolDial(t, dsn, nil) }

// pgPoolDial is pgPoolWith dialling through dial, unless it is nil.
func pgPoolDial(t testing.TB, dsn string, dial dialFunc) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 16
	if dial != nil {
		cfg.ConnConfig.DialFunc = dial
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err == nil {
		err = pool.Ping(context.Background())
	}
	if err != nil {
		unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// pgConn returns one connection on dsn, closed when the test ends.
func pgConn(t testing.TB, dsn string) *pgx.Conn { return pgConnDial(t, dsn, nil) }

// pgConnDial is pgConn dialling through dial, unless it is nil.
func pgConnDial(t testing.TB, dsn string, dial dialFunc) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	if dial != nil {
		cfg.DialFunc = dial
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// pgxBegin begins on db, a pool or a connection.
func pgxBegin(db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}) func(t *testing.T) (any, func(bool) error) {
	return func(t *testing.T) (any, func(bool) error) {
		tx, err := db.Begin(context.Background())
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // when a check failed before its end
		return tx, func(commit bool) error {
			if commit {
				return tx.Commit(context.Background())
			}
			return tx.Rollback(context.Background())
		}
	}
}

// sqlBegin begins on db, a *sql.DB or a *sql.Conn.
func sqlBegin(db inbox.SQLDB) func(t *testing.T) (any, func(bool) error) {
	return func(t *testing.T) (any, func(bool) error) {
		tx, err := db.BeginTx(context.Background(), nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() }) // when a check failed before its end
		return tx, func(commit bool) error {
			if commit {
				return tx.Commit()
			}
			return tx.Rollback()
		}
	}
}

// sqlConn returns one connection of db, closed when the test ends.
func sqlConn(t testing.TB, db *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// pgxFixture is PostgresStore on dsn, over a pool or one connection.
func pgxFixture(t *testing.T, dsn string, handle handleKind, opts storeOpts) fixture {
	nf := newNetFaults(opts, netfault.Postgres)
	pool := pgPoolDial(t, dsn, nf.dial())
	cfg := inbox.PostgresConfig{Table: tableName("inbox"), LockTimeout: opts.lockTimeout}
	store := newPgxStore(t, pool, cfg)
	ledger := newPgLedger(t, pool)
	if nf != nil {
		nf.steps = pgFaultSteps(pgFaultTable("", cfg.Table), ledger.table)
	}
	fx := fixture{
		store: store, handle: handle, ledger: ledger, lock: pgLockProbe, faults: nf,
		peer:       func(*testing.T) inbox.Store { return store },
		begin:      pgxBegin(pool),
		beginOther: func(t *testing.T) (any, func(bool) error) { return pgxBegin(pgPoolWith(t, dsn))(t) },
	}
	if handle == onePgxConn {
		open := func(t *testing.T) (*pgx.Conn, inbox.Store) {
			conn := pgConnDial(t, dsn, nf.dial())
			s, err := inbox.NewPostgresStore(conn, cfg)
			require.NoError(t, err)
			return conn, s
		}
		var conn *pgx.Conn
		conn, fx.store = open(t)
		fx.begin = pgxBegin(conn)
		fx.peer = func(t *testing.T) inbox.Store { _, s := open(t); return s }
		if nf != nil { // a connection a fault broke is never usable again: connect anew
			redial := func(t *testing.T) inbox.Store {
				return newRedialStore(func() (inbox.Store, func() bool) { c, s := open(t); return s, c.IsClosed })
			}
			fx.store, fx.peer = redial(t), redial
		}
	}
	return fx
}

func pgxFlavour() storeFlavour {
	return pgxLikeFlavour("pgx", pooled, nil)
}

func pgxConnFlavour() storeFlavour {
	return pgxLikeFlavour("pgx-conn", onePgxConn, nil)
}

// pgxSessionFlavour runs on sessions unlike the server's defaults: serializable by
// default, backslashes as escapes (the folded claim then takes the parameterized path),
// bytea in escape form, a search path that starts with a schema that does not exist.
func pgxSessionFlavour() storeFlavour {
	return pgxLikeFlavour("pgx-session-settings", pooled, map[string]string{
		"default_transaction_isolation": "serializable",
		"standard_conforming_strings":   "off",
		"bytea_output":                  "escape",
		"search_path":                   "nosuchschema,public",
		"statement_timeout":             "120s",
	})
}

func pgxLikeFlavour(name string, handle handleKind, settings map[string]string) storeFlavour {
	return storeFlavour{
		name: name,
		open: func(t *testing.T, opts storeOpts) fixture {
			return pgxFixture(t, pgDSN(t, settings), handle, opts)
		},
		creators: pgxCreators(func(t testing.TB) string { return pgDSN(t, settings) }, handle),
		missing: func(t *testing.T) inbox.Store {
			store, err := inbox.NewPostgresStore(pgPool(t), inbox.PostgresConfig{Table: tableName("missing")})
			require.NoError(t, err)
			return store
		},
	}
}

// sqlOpener opens a flavour's *sql.DB, dialling through dial unless it is nil.
type sqlOpener func(t testing.TB, dial dialFunc) *sql.DB

// sqlFixture is a database/sql store over open's *sql.DB or one of its connections.
func sqlFixture(t *testing.T, open sqlOpener, handle handleKind, mysql bool, opts storeOpts,
	newStore func(t *testing.T, db *sql.DB, handle inbox.SQLDB, table string) inbox.Store) fixture {
	nf := newNetFaults(opts, netfault.Postgres)
	if mysql {
		nf = newNetFaults(opts, netfault.MySQL)
	}
	db := open(t, nf.dial())
	table := tableName("inbox")
	store := newStore(t, db, db, table)
	ledger := newSQLLedger(t, db, mysql)
	fx := fixture{
		store: store, handle: handle, ledger: ledger, lock: pgLockProbe, faults: nf,
		peer:       func(*testing.T) inbox.Store { return store },
		begin:      sqlBegin(db),
		beginOther: func(t *testing.T) (any, func(bool) error) { return sqlBegin(open(t, nil))(t) },
	}
	if mysql {
		fx.lock = myLockProbe
	}
	if nf != nil {
		nf.steps = pgFaultSteps(pgFaultTable("", table), ledger.table)
		if mysql {
			nf.steps = mysqlFaultSteps(table, ledger.table)
		}
	}
	if handle == oneSQLConn {
		conn := sqlConn(t, db)
		fx.store = newStore(t, nil, conn, table)
		fx.begin = sqlBegin(conn)
		fx.peer = func(t *testing.T) inbox.Store { return newStore(t, nil, sqlConn(t, db), table) }
		if nf != nil { // a connection a fault broke is never usable again: take another
			redial := func(t *testing.T) inbox.Store {
				return newRedialStore(func() (inbox.Store, func() bool) {
					c := sqlConn(t, db)
					return newStore(t, nil, c, table), func() bool { return sqlConnDead(c) }
				})
			}
			fx.store, fx.peer = redial(t), redial
		}
	}
	return fx
}

// sqlPostgresDBWith is the test PostgreSQL through database/sql, with session settings.
func sqlPostgresDBWith(t testing.TB, dial dialFunc) *sql.DB {
	dsn := pgDSN(t, nil)
	if dial != nil {
		dsn = pgxDialDSN(t, dsn, dial)
	}
	return openSQL(t, "pgx", dsn, "PostgreSQL", "INBOX_POSTGRES_DSN")
}

// newSQLPostgresFlavourStore opens a SQLPostgresStore on table over handle; with db, it
// creates the tables first.
func newSQLPostgresFlavourStore(lockTimeout time.Duration) func(t *testing.T, db *sql.DB, handle inbox.SQLDB, table string) inbox.Store {
	return func(t *testing.T, db *sql.DB, handle inbox.SQLDB, table string) inbox.Store {
		cfg := inbox.SQLPostgresConfig{Table: table, LockTimeout: lockTimeout}
		if db != nil {
			newSQLPostgresStore(t, db, cfg)
		}
		store, err := inbox.NewSQLPostgresStore(handle, cfg)
		require.NoError(t, err)
		return store
	}
}

func sqlPostgresFlavour() storeFlavour { return sqlPostgresLikeFlavour("sqlpostgres", pooled) }
func sqlPostgresConnFlavour() storeFlavour {
	return sqlPostgresLikeFlavour("sqlpostgres-conn", oneSQLConn)
}

func sqlPostgresLikeFlavour(name string, handle handleKind) storeFlavour {
	return storeFlavour{
		name: name,
		open: func(t *testing.T, opts storeOpts) fixture {
			return sqlFixture(t, sqlPostgresDBWith, handle, false, opts, newSQLPostgresFlavourStore(opts.lockTimeout))
		},
		creators: sqlPostgresCreators(sqlPostgresDBWith, handle),
		missing: func(t *testing.T) inbox.Store {
			store, err := inbox.NewSQLPostgresStore(sqlPostgresDB(t), inbox.SQLPostgresConfig{Table: tableName("missing")})
			require.NoError(t, err)
			return store
		},
	}
}

// mysqlOpener opens MySQL or MariaDB at dsn, with the non-default session
// innodb_lock_wait_timeout added.
func mysqlOpener(dsn func(t testing.TB) string) func(t testing.TB) *sql.DB {
	open := mysqlDialOpener(dsn)
	return func(t testing.TB) *sql.DB { return open(t, nil) }
}

// mysqlDialOpener is mysqlOpener dialling through dial, unless it is nil.
func mysqlDialOpener(dsn func(t testing.TB) string) sqlOpener {
	return func(t testing.TB, dial dialFunc) *sql.DB {
		d := withDSNParams(t, dsn(t), map[string]string{"innodb_lock_wait_timeout": mySessionLock})
		if dial != nil {
			d = mysqlDialDSN(t, d, dial)
		}
		return openSQL(t, "mysql", d, "MySQL or MariaDB", "INBOX_MARIADB_DSN or INBOX_MYSQL_DSN")
	}
}

// mariaDBDSNOf and mysqlDSNOf are the DSNs of the test servers; mysqlDSNOf skips when
// INBOX_MYSQL_DSN is unset.
func mariaDBDSNOf(testing.TB) string { return mariaDBDSN() }

func mysqlDSNOf(t testing.TB) string {
	mysqlDB(t) // skips when INBOX_MYSQL_DSN is unset
	return os.Getenv("INBOX_MYSQL_DSN")
}

// mariaDBSessionSettings is MariaDB on sessions unlike the server's defaults:
// serializable by default, ANSI quotes, backslashes as plain characters, another time
// zone.
func mariaDBSessionSettings(t testing.TB) string {
	return withDSNParams(t, mariaDBDSN(), map[string]string{
		"tx_isolation": "'SERIALIZABLE'",
		"sql_mode":     "'ANSI_QUOTES,NO_BACKSLASH_ESCAPES,STRICT_ALL_TABLES'",
		"time_zone":    "'-07:00'",
	})
}

// newMySQLFlavourStore opens a MySQLStore on table over handle; with db, it creates the
// tables first.
func newMySQLFlavourStore(cfg inbox.MySQLConfig) func(t *testing.T, db *sql.DB, handle inbox.SQLDB, table string) inbox.Store {
	return func(t *testing.T, db *sql.DB, handle inbox.SQLDB, table string) inbox.Store {
		cfg := cfg
		cfg.Table = table
		if db != nil {
			newMySQLStore(t, db, cfg)
		}
		store, err := inbox.NewMySQLStore(handle, cfg)
		require.NoError(t, err)
		return store
	}
}

// mysqlFlavour is MySQLStore on the server at dsn: MariaDB or MySQL.
func mysqlFlavour(name string, dsn func(t testing.TB) string, cfg inbox.MySQLConfig) storeFlavour {
	return mysqlLikeFlavour(name, dsn, pooled, cfg)
}

func mysqlConnFlavour(name string, dsn func(t testing.TB) string) storeFlavour {
	return mysqlLikeFlavour(name, dsn, oneSQLConn, inbox.MySQLConfig{})
}

func mysqlLikeFlavour(name string, dsn func(t testing.TB) string, handle handleKind, cfg inbox.MySQLConfig) storeFlavour {
	open := mysqlDialOpener(dsn)
	var refused error
	if handle == oneSQLConn {
		refused = errors.ErrUnsupported // a *sql.Conn of go-sql-driver cannot lend a connection of its own
	}
	return storeFlavour{
		name: name,
		caps: caps{purgeTurnRefused: refused},
		open: func(t *testing.T, opts storeOpts) fixture {
			cfg := cfg
			cfg.LockTimeout = opts.lockTimeout
			return sqlFixture(t, open, handle, true, opts, newMySQLFlavourStore(cfg))
		},
		creators: mysqlCreators(open, handle, cfg),
		missing: func(t *testing.T) inbox.Store {
			store, err := inbox.NewMySQLStore(open(t, nil), inbox.MySQLConfig{Table: tableName("missing"), Engine: cfg.Engine})
			require.NoError(t, err)
			return store
		},
	}
}

// endTx commits the inbox transaction in ctx behind the middleware's back, as a handler
// must not.
func endTx(t *testing.T, ctx context.Context) error {
	if tx, ok := inbox.TxFromContext[pgx.Tx](ctx); ok {
		return tx.Commit(ctx)
	}
	if tx, ok := inbox.TxFromContext[*sql.Tx](ctx); ok {
		return tx.Commit()
	}
	if tx, ok := inbox.TxFromContext[*redisstore.Tx](ctx); ok {
		_, _ = tx.Exec(ctx) // ends it and says so; the handler returns nil as with the others
		return nil
	}
	return fmt.Errorf("no transaction in the context")
}

// ledger is a table of credits that handlers write through the inbox transaction.
type ledger interface {
	credit(ctx context.Context, amount int) error
	balance(t testing.TB) (total, credits int)
}
