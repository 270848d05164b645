package inbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// exerciseAttempts is the part of the conformance suite about Config.MaxAttempts: only
// attempts whose process died count, never concurrent duplicates that fail cleanly.
func exerciseAttempts(t *testing.T, f storeFlavour) {
	ctx := f.context() // the tenant flavours' tenant

	// Issue 19, defect 1: four deliveries of one message race, and each fails cleanly.
	// The count read before the claim waited made the last one look poisoned.
	for _, c := range []struct {
		name        string
		maxAttempts int
		racers      int
		// holdFirst keeps the first delivery in its handler while the others start, so
		// that they all wait on its key; otherwise they start at once.
		holdFirst bool
	}{
		{"QueuedBehindTheFirst", 3, 4, true},
		{"AllAtOnce", 3, 4, false},
		{"MaxAttemptsOne", 1, 2, true},
	} {
		t.Run("ConcurrentCleanFailuresAreNotCrashes/"+c.name, func(t *testing.T) {
			t.Parallel()
			fx := f.open(t, storeOpts{})
			f.skipRefusedAttempts(t, fx.store)
			boom := errors.New("provider timed out")
			inHandler := make(chan struct{}, c.racers)
			release := make(chan struct{})
			start := make(chan struct{})
			errs := make([]error, c.racers)
			firstDone := make(chan struct{}) // the first racer returned
			var wg sync.WaitGroup
			for i := range c.racers {
				peer := newTestInbox(t, fx.peer(t), inbox.Config{MaxAttempts: c.maxAttempts})
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i == 0 {
						defer close(firstDone)
					}
					<-start
					_, errs[i] = peer.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
						if err := fx.ledger.credit(ctx, 1); err != nil {
							return err
						}
						inHandler <- struct{}{}
						<-release
						return boom
					})
				}()
				if c.holdFirst && i == 0 {
					close(start)
					select {
					case <-inHandler: // the first holds the key; the others queue behind it
					case <-firstDone:
						t.Fatalf("the first delivery returned without reaching its handler: %v", errs[0])
					}
					start = make(chan struct{})
				}
			}
			close(start)
			if c.holdFirst {
				time.Sleep(300 * time.Millisecond) // let the others reach the key's wait
			}
			close(release)
			wg.Wait()
			for i, err := range errs {
				require.Error(t, err, "racer %d", i)
				require.NotErrorIs(t, err, inbox.ErrTooManyAttempts, "racer %d: a clean failure is not a crash", i)
				if !errors.Is(err, boom) {
					// InnoDB may answer one waiter of a three-way race with a deadlock.
					require.ErrorIs(t, err, inbox.ErrContended, "racer %d", i)
				}
			}
			// Nothing crashed: the next delivery is processed.
			ib := newTestInbox(t, fx.store, inbox.Config{MaxAttempts: c.maxAttempts})
			dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-1", 190)
			require.NoError(t, err, "a healthy message is never refused")
			require.False(t, dup)
			total, credits := fx.ledger.balance(t)
			require.Equal(t, [2]int{190, 1}, [2]int{total, credits})
		})
	}

	// Issue 19, defect 4 on the SQL stores: a committed delivery and its duplicates end
	// their attempts, so no attempt outlives its key. Before, a duplicate recreated the
	// key's purged attempt count, which the key's own purge then left behind: the
	// message's next delivery, new again, was refused.
	t.Run("NoAttemptOutlivesItsKey", func(t *testing.T) {
		if f.caps.noPurge {
			t.Skip("the store's keys and attempts expire by themselves")
		}
		t.Parallel()
		fx := f.open(t, storeOpts{})
		f.skipRefusedAttempts(t, fx.store)
		ib := newTestInbox(t, fx.store, inbox.Config{MaxAttempts: 2})
		between := func() time.Time { // a cutoff between what came before and what comes after
			time.Sleep(20 * time.Millisecond)
			defer time.Sleep(20 * time.Millisecond)
			return time.Now()
		}
		require.Zero(t, crashedAttempt(t, ctx, fx.store, "billing", "order-1"))
		afterCrash := between()
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-1", 1)
		require.NoError(t, err, "one crash, MaxAttempts 2")
		require.False(t, dup)
		afterCommit := between()
		_, err = fx.store.PurgeBatch(ctx, afterCrash, 100) // the crash goes, the key stays
		require.NoError(t, err)
		for range 3 {
			dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-1", 1)
			require.NoError(t, err)
			require.True(t, dup)
		}
		n, err := fx.store.PurgeBatch(ctx, afterCommit, 100) // the key goes
		require.NoError(t, err)
		require.EqualValues(t, 1, n.Keys)
		claim, err := fx.store.Claim(ctx, attemptOf("billing", "order-1"))
		require.NoError(t, err)
		require.False(t, claim.Duplicate, "the key was purged")
		require.Zero(t, claim.Unfinished, "no attempt of the key is left")
		require.NoError(t, claim.Tx.Rollback(ctx))
	})

	t.Run("ManyCleanFailuresInARow", func(t *testing.T) {
		t.Parallel()
		fx := f.open(t, storeOpts{})
		f.skipRefusedAttempts(t, fx.store)
		ib := newTestInbox(t, fx.store, inbox.Config{MaxAttempts: 2})
		for i := range 5 {
			_, err := ib.Process(ctx, "billing", "order-1", func(context.Context) error { return fmt.Errorf("failure %d", i) })
			require.ErrorContains(t, err, fmt.Sprintf("failure %d", i))
		}
		dup, err := creditOnce(ctx, ib, fx.ledger, "billing", "order-1", 1)
		require.NoError(t, err)
		require.False(t, dup)
	})
}

// attemptToken returns a random attempt token, as the middleware makes one per delivery.
func attemptToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// attemptOf returns a Record of consumer and key with a fresh attempt.
func attemptOf(consumer, key string) inbox.Record {
	return inbox.Record{Consumer: consumer, Key: key, Attempt: attemptToken()}
}

// crashedAttempt leaves an attempt of consumer's key that started and never ended, as a
// process that died mid-handler does (crash_test.go kills real processes): its claim is
// abandoned. It returns the attempts the claim found unfinished before it.
func crashedAttempt(t *testing.T, ctx context.Context, store inbox.Store, consumer, key string) int {
	t.Helper()
	claim, err := store.Claim(ctx, attemptOf(consumer, key))
	require.NoError(t, err)
	require.False(t, claim.Duplicate, "only a new key's attempt can crash")
	require.NoError(t, claim.Tx.Abandon(ctx))
	return claim.Unfinished
}

// A process that dies mid-handler takes its database sessions with it: its attempt's
// lock goes, its row stays, and the next claim counts it. Here the session of an
// attempt's claim is killed by the server, and nothing more is sent on it: no
// rollback, no unlock, as after a SIGKILL.
func TestAttempts_ADeadSessionIsACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type target struct {
		name string
		// open returns a store on fresh tables over a single connection, and the same
		// tables' store over a handle of its own.
		open func(t *testing.T) (crashing, other inbox.Store)
		// kill makes the server end the session whose transaction tx is.
		kill func(t *testing.T, tx any)
	}
	pgKill := func(t *testing.T, tx any) {
		var pid int
		require.NoError(t, scanIn(ctx, tx, "SELECT pg_backend_pid()", &pid))
		_, err := pgPool(t).Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		require.NoError(t, err)
	}
	myKill := func(db func(t testing.TB) *sql.DB) func(t *testing.T, tx any) {
		return func(t *testing.T, tx any) {
			var id int64
			require.NoError(t, scanIn(ctx, tx, "SELECT CONNECTION_ID()", &id))
			_, err := db(t).ExecContext(ctx, fmt.Sprint("KILL ", id))
			require.NoError(t, err)
		}
	}
	myOpen := func(db func(t testing.TB) *sql.DB, cfg inbox.MySQLConfig) func(t *testing.T) (inbox.Store, inbox.Store) {
		return func(t *testing.T) (inbox.Store, inbox.Store) {
			cfg := cfg
			cfg.Table = tableName("inbox")
			other := newMySQLStore(t, db(t), cfg)
			crashing, err := inbox.NewMySQLStore(sqlConn(t, db(t)), cfg)
			require.NoError(t, err)
			return crashing, other
		}
	}
	for _, tg := range []target{
		{name: "pgx", kill: pgKill, open: func(t *testing.T) (inbox.Store, inbox.Store) {
			table := tableName("inbox")
			other := newPgxStore(t, pgPool(t), inbox.PostgresConfig{Table: table})
			crashing, err := inbox.NewPostgresStore(pgConn(t, postgresDSN()), inbox.PostgresConfig{Table: table})
			require.NoError(t, err)
			return crashing, other
		}},
		{name: "sqlpostgres", kill: pgKill, open: func(t *testing.T) (inbox.Store, inbox.Store) {
			table := tableName("inbox")
			other := newSQLPostgresStore(t, sqlPostgresDB(t), inbox.SQLPostgresConfig{Table: table})
			crashing, err := inbox.NewSQLPostgresStore(sqlConn(t, sqlPostgresDB(t)), inbox.SQLPostgresConfig{Table: table})
			require.NoError(t, err)
			return crashing, other
		}},
		{name: "mariadb", kill: myKill(mariaDB), open: myOpen(mariaDB, inbox.MySQLConfig{})},
		{name: "mysql", kill: myKill(mysqlDB), open: myOpen(mysqlDB, inbox.MySQLConfig{})},
		{name: "tidb", kill: myKill(tidbDB), open: myOpen(tidbDB, inbox.MySQLConfig{Engine: inbox.MySQLTiDB})},
		// vtgate refuses KILL: the client's connection is cut instead, as a process's
		// death cuts it.
		{name: "vitess", kill: func(*testing.T, any) { vitessCut.sever() }, open: func(t *testing.T) (inbox.Store, inbox.Store) {
			vschemaMu.Lock() // see vitessFlavour
			defer vschemaMu.Unlock()
			cfg := inbox.MySQLConfig{Engine: inbox.MySQLVitess, Table: tableName("inbox")}
			other := newMySQLStore(t, vitessDB(t), cfg)
			cut := openSQL(t, "mysql", vitessCut.dsn(t, vitessDSNOf(t)), "Vitess", "INBOX_VITESS_DSN")
			crashing, err := inbox.NewMySQLStore(cut, cfg) // a pool: on Vitess the count takes a second connection
			require.NoError(t, err)
			return crashing, other
		}},
	} {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			crashing, other := tg.open(t)
			claim, err := crashing.Claim(ctx, attemptOf("billing", "order-1"))
			require.NoError(t, err)
			require.False(t, claim.Duplicate)
			tg.kill(t, claim.Tx.Handle())
			if tx, ok := claim.Tx.Handle().(*sql.Tx); ok {
				_ = tx.Rollback() // only database/sql's state: the session is gone
			}

			// The killed session's claim rolled back: the key is new, and its attempt died.
			claim, err = other.Claim(ctx, attemptOf("billing", "order-1"))
			require.NoError(t, err)
			require.False(t, claim.Duplicate)
			require.Equal(t, 1, claim.Unfinished, "the attempt of the killed session is a crash")
			require.NoError(t, claim.Tx.Rollback(ctx))
		})
	}
}

// scanIn reads one row of query in a pgx.Tx or *sql.Tx.
func scanIn(ctx context.Context, tx any, query string, dest ...any) error {
	switch tx := tx.(type) {
	case pgx.Tx:
		return tx.QueryRow(ctx, query).Scan(dest...)
	case *sql.Tx:
		return tx.QueryRowContext(ctx, query).Scan(dest...)
	}
	return fmt.Errorf("not a transaction: %T", tx)
}

// severable dials MySQL-wire connections that sever can cut, as a process's death does.
type severable struct {
	name  string
	once  sync.Once
	mu    sync.Mutex
	conns []net.Conn
}

var vitessCut = &severable{name: "severable-vitess"}

// dsn returns dsn dialling through s.
func (s *severable) dsn(t testing.TB, dsn string) string {
	s.once.Do(func() {
		mysql.RegisterDialContext(s.name, func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err == nil {
				s.mu.Lock()
				s.conns = append(s.conns, conn)
				s.mu.Unlock()
			}
			return conn, err
		})
	})
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.Net = s.name
	return cfg.FormatDSN()
}

// sever closes every connection s dialled.
func (s *severable) sever() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

// New refuses MaxAttempts where the dead attempts could not be counted right: a
// PostgresStore over a PgxDB it cannot pin a connection of, and a single connection
// whose claims run at a level where the count needs a second one.
func TestAttempts_NewRefusesWhatCannotCount(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	table := tableName("inbox")
	newPgxStore(t, pool, inbox.PostgresConfig{Table: table})
	conn, err := pool.Acquire(context.Background()) // a PgxDB, but not one the store knows
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	rr := pgx.TxOptions{IsoLevel: pgx.RepeatableRead}
	db := sqlPostgresDB(t)
	newSQLPostgresStore(t, db, inbox.SQLPostgresConfig{Table: table})
	maria := mariaDB(t)
	myTable := tableName("inbox")
	newMySQLStore(t, maria, inbox.MySQLConfig{Table: myTable})
	for _, c := range []struct {
		name  string
		store func() (inbox.Store, error)
		want  string // "" when New accepts it
	}{
		{"pgx pool at REPEATABLE READ", func() (inbox.Store, error) {
			return inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table, TxOptions: rr})
		}, ""},
		{"pgx conn at REPEATABLE READ", func() (inbox.Store, error) {
			return inbox.NewPostgresStore(pgConn(t, postgresDSN()), inbox.PostgresConfig{Table: table, TxOptions: rr})
		}, "needs PostgresConfig.TxOptions at READ COMMITTED"},
		{"another PgxDB", func() (inbox.Store, error) {
			return inbox.NewPostgresStore(wrappedPgxDB{conn}, inbox.PostgresConfig{Table: table})
		}, "MaxAttempts needs a PostgresStore over a *pgxpool.Pool"},
		{"sql.Conn at READ COMMITTED", func() (inbox.Store, error) {
			return inbox.NewSQLPostgresStore(sqlConn(t, db), inbox.SQLPostgresConfig{Table: table})
		}, ""},
		{"sql.Conn at SERIALIZABLE", func() (inbox.Store, error) {
			return inbox.NewSQLPostgresStore(sqlConn(t, db), inbox.SQLPostgresConfig{Table: table, Isolation: sql.LevelSerializable})
		}, "MaxAttempts over a *sql.Conn needs"},
		{"MySQL sql.Conn at SERIALIZABLE", func() (inbox.Store, error) {
			return inbox.NewMySQLStore(sqlConn(t, maria), inbox.MySQLConfig{Table: myTable, Isolation: sql.LevelSerializable})
		}, "MaxAttempts over a *sql.Conn needs"},
		{"MySQL sql.Conn at REPEATABLE READ", func() (inbox.Store, error) {
			return inbox.NewMySQLStore(sqlConn(t, maria), inbox.MySQLConfig{Table: myTable, Isolation: sql.LevelRepeatableRead})
		}, "MaxAttempts over a *sql.Conn needs"},
		{"MySQL sql.Conn at READ COMMITTED", func() (inbox.Store, error) {
			return inbox.NewMySQLStore(sqlConn(t, maria), inbox.MySQLConfig{Table: myTable})
		}, ""},
		{"MySQL pool at the session's level", func() (inbox.Store, error) {
			return inbox.NewMySQLStore(maria, inbox.MySQLConfig{Table: myTable, SessionIsolation: true})
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			store, err := c.store()
			require.NoError(t, err)
			_, err = inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: 3})
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.want)
			require.ErrorContains(t, err, "inbox: invalid config: MaxAttempts is 3")
			_, err = inbox.New(inbox.Config{Store: store, Consumer: "billing"})
			require.NoError(t, err, "without MaxAttempts it is fine")
		})
	}
}

// wrappedPgxDB is a PgxDB the store does not know.
type wrappedPgxDB struct{ inbox.PgxDB }

// The attempt's session lock never stays with the connection, even when ending the
// attempt fails (here a trigger refuses the delete): a lock left behind would make the
// attempt's row look alive for as long as the connection lives, and grow the server's
// lock table. Over a single *pgx.Conn, which no pool replaces, the connection must also
// come back usable.
func TestAttempts_LockNeverOutlivesTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	table := tableName("inbox")
	other := pgPool(t)
	newPgxStore(t, other, inbox.PostgresConfig{Table: table})
	conn := pgConn(t, postgresDSN())
	store, err := inbox.NewPostgresStore(conn, inbox.PostgresConfig{Table: table})
	require.NoError(t, err)
	held := func() int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&n))
		return n
	}
	for _, end := range []func(inbox.Tx) error{
		func(tx inbox.Tx) error { return tx.Rollback(ctx) },
		func(tx inbox.Tx) error { return tx.Abandon(ctx) },
		func(tx inbox.Tx) error { return tx.Commit(ctx, nil) },
	} {
		claim, err := store.Claim(ctx, attemptOf("billing", "order-1"))
		require.NoError(t, err)
		require.NoError(t, end(claim.Tx))
		require.Zero(t, held())
	}

	// Deleting the attempt's row fails now: a trigger raises.
	claim, err := store.Claim(ctx, attemptOf("billing", "order-2"))
	require.NoError(t, err)
	fn := pgx.Identifier{table + "_fail"}.Sanitize()
	_, err = other.Exec(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$;
		CREATE TRIGGER refuse BEFORE DELETE ON `+pgx.Identifier{table + "_attempts"}.Sanitize()+` FOR EACH ROW EXECUTE FUNCTION `+fn+`()`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = other.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+fn+` CASCADE`) })
	rbErr := claim.Tx.Rollback(ctx)
	require.ErrorContains(t, rbErr, "refused", "ending the attempt failed")
	require.Zero(t, held(), "the lock went all the same, and the connection is usable")
}
