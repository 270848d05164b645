package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
)

// Database faults: the connection of the inbox transaction dies mid-handler, while idle
// in the pool, at BEGIN, or while COMMIT is on its way, so that the client cannot know
// whether it committed. In every case the middleware returns an error (the router
// nacks) unless the transaction committed, and the redelivery is processed, or skipped
// when the first commit went through: the ledger shows the message applied exactly once.

// faultDB is one database under the fault tests, on tables of its own.
type faultDB struct {
	// direct is the store on an ordinary pool; faulty is the same store on connections
	// dialled through net.
	direct, faulty inbox.Store
	net            *netfault.Injector
	ledger         ledger
	// connID returns the server's id of the inbox transaction's connection, from inside
	// the handler.
	connID func(ctx context.Context) (int64, error)
	// kill ends a connection on the server side and returns once it is gone.
	kill func(t *testing.T, id int64)
	// oneConn returns a store over a pool of one open connection, and that connection's id.
	oneConn func(t *testing.T) (inbox.Store, int64)
	// begin and commit are the client's BEGIN and the inbox transaction's COMMIT.
	begin, commit netfault.Step
}

func faultBackends() []struct {
	name string
	open func(t *testing.T) faultDB
} {
	return []struct {
		name string
		open func(t *testing.T) faultDB
	}{
		{"postgres", openPgFaultDB},
		{"mariadb", func(t *testing.T) faultDB { return openMySQLFaultDB(t, mariaDB(t), mariaDBDSN()) }},
		{"mysql", func(t *testing.T) faultDB { return openMySQLFaultDB(t, mysqlDB(t), os.Getenv("INBOX_MYSQL_DSN")) }},
	}
}

func openPgFaultDB(t *testing.T) faultDB {
	pool := pgPool(t)
	table := tableName("inbox")
	f := faultDB{direct: newPgxStore(t, pool, inbox.PostgresConfig{Table: table}), ledger: newPgLedger(t, pool)}
	newPool := func(t *testing.T, edit func(cfg *pgxpool.Config)) (*pgxpool.Pool, inbox.Store) {
		cfg, err := pgxpool.ParseConfig(postgresDSN())
		require.NoError(t, err)
		edit(cfg)
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		store, err := inbox.NewPostgresStore(p, inbox.PostgresConfig{Table: table})
		require.NoError(t, err)
		return p, store
	}
	f.net = netfault.New(netfault.Postgres)
	_, f.faulty = newPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.DialFunc = f.net.DialContext })
	f.connID = func(ctx context.Context) (int64, error) {
		tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
		if !ok {
			return 0, fmt.Errorf("no pgx.Tx in the context")
		}
		var pid int64
		return pid, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
	}
	f.kill = func(t *testing.T, pid int64) {
		var done bool
		// With a timeout, pg_terminate_backend returns once the backend has exited.
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&done))
		require.True(t, done, "backend %d still running", pid)
	}
	f.oneConn = func(t *testing.T) (inbox.Store, int64) {
		p, store := newPool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
		var pid int64
		require.NoError(t, p.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid))
		return store, pid
	}
	// pgx sends "begin isolation level read committed" (the store folds the key's INSERT
	// into that query) and "commit".
	claim := netfault.Contains("INSERT INTO " + pgx.Identifier{table}.Sanitize() + " (")
	f.begin = netfault.Step{Match: netfault.HasPrefix("begin isolation level")}
	f.commit = netfault.Step{Match: netfault.Equal("commit"), After: claim}
	return f
}

func openMySQLFaultDB(t *testing.T, db *sql.DB, dsn string) faultDB {
	table := tableName("inbox")
	f := faultDB{direct: newMySQLStore(t, db, inbox.MySQLConfig{Table: table}), ledger: newSQLLedger(t, db, true)}
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	newDB := func(t *testing.T, dsn string, maxConns int) (*sql.DB, inbox.Store) {
		d, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		d.SetMaxOpenConns(maxConns)
		store, err := inbox.NewMySQLStore(d, inbox.MySQLConfig{Table: table})
		require.NoError(t, err)
		return d, store
	}
	f.net = netfault.New(netfault.MySQL)
	_, f.faulty = newDB(t, mysqlDialDSN(t, cfg.FormatDSN(), f.net.DialContext), 0)
	f.connID = func(ctx context.Context) (int64, error) {
		tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
		if !ok {
			return 0, fmt.Errorf("no *sql.Tx in the context")
		}
		var id int64
		return id, tx.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id)
	}
	f.kill = func(t *testing.T, id int64) {
		_, err := db.Exec(fmt.Sprintf("KILL %d", id))
		require.NoError(t, err)
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE id = ?`, id).Scan(&n)
			var myErr *mysql.MySQLError
			switch {
			case errors.As(err, &myErr) && myErr.Number == 3854:
				// MySQL 9 fails the whole query when another session's statement text,
				// shown with its parameters (a binary fingerprint), is not valid UTF-8.
			case err != nil:
				require.NoError(t, err)
			case n == 0:
				return
			}
			require.True(t, time.Now().Before(deadline), "connection %d still there 10s after KILL", id)
			time.Sleep(10 * time.Millisecond)
		}
	}
	f.oneConn = func(t *testing.T) (inbox.Store, int64) {
		d, store := newDB(t, cfg.FormatDSN(), 1)
		var id int64
		require.NoError(t, d.QueryRow(`SELECT CONNECTION_ID()`).Scan(&id))
		return store, id
	}
	// go-sql-driver/mysql sends "START TRANSACTION" and "COMMIT".
	claim := netfault.Contains("INSERT INTO `" + table + "` (")
	f.begin = netfault.Step{Match: netfault.HasPrefix("START TRANSACTION")}
	f.commit = netfault.Step{Match: netfault.Equal("COMMIT"), After: claim}
	return f
}

// faultKit delivers one message (one UUID) to a handler through an inbox.
type faultKit struct {
	t       *testing.T
	f       faultDB
	uuid    string
	calls   int
	inboxes map[inbox.Store]*inbox.Inbox
}

const faultConsumer = "faults"

// inbox returns the inbox over store, made (and its tables verified) at the first call.
func (k *faultKit) inbox(store inbox.Store) *inbox.Inbox {
	if k.inboxes[store] == nil {
		ib, err := inbox.New(inbox.Config{Store: store, Consumer: faultConsumer})
		require.NoError(k.t, err)
		k.inboxes[store] = ib
	}
	return k.inboxes[store]
}

func (k *faultKit) deliver(store inbox.Store, h func(ctx context.Context) error) (duplicate bool, err error) {
	ib := k.inbox(store)
	msg := message.NewMessage(k.uuid, []byte("credit 1"))
	_, err = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		k.calls++
		return nil, h(msg.Context())
	})(msg)
	return msg.Metadata.Get(inbox.MetadataDuplicate) == "true", err
}

func (k *faultKit) credit(ctx context.Context) error { return k.f.ledger.credit(ctx, 1) }

// applied returns how many times the message was applied and whether its key is stored.
func (k *faultKit) applied() (credits int, keyStored bool) {
	_, credits = k.f.ledger.balance(k.t)
	stats, err := k.f.direct.Stats(context.Background())
	require.NoError(k.t, err)
	for _, s := range stats {
		if s.Consumer == faultConsumer {
			require.EqualValues(k.t, 1, s.Keys, "keys of the one message")
			return credits, true
		}
	}
	return credits, false
}

// requireNotApplied checks that the failed delivery left nothing behind.
func (k *faultKit) requireNotApplied() {
	credits, stored := k.applied()
	require.Zero(k.t, credits, "a credit of a transaction that did not commit")
	require.False(k.t, stored, "the key of a transaction that did not commit")
}

// requireAppliedOnce checks the ledger, then that one more delivery is a duplicate that
// does not reach the handler.
func (k *faultKit) requireAppliedOnce() {
	credits, stored := k.applied()
	require.Equal(k.t, 1, credits, "credits of the message")
	require.True(k.t, stored, "the key is stored")
	calls := k.calls
	dup, err := k.deliver(k.f.direct, k.credit)
	require.NoError(k.t, err)
	require.True(k.t, dup, "one more delivery is a duplicate")
	require.Equal(k.t, calls, k.calls, "the duplicate reached the handler")
	credits, _ = k.applied()
	require.Equal(k.t, 1, credits, "credits after the duplicate")
}

// redeliverUntilAcked redelivers through store until the middleware returns nil, checking
// after each attempt that an error left nothing committed, and fails after three.
func (k *faultKit) redeliverUntilAcked(store inbox.Store) {
	for range 3 {
		dup, err := k.deliver(store, k.credit)
		if err == nil {
			require.False(k.t, dup, "the first acked delivery of a message that never committed")
			return
		}
		k.t.Logf("redelivery failed (nacked): %v", err)
		k.requireNotApplied()
	}
	k.t.Fatal("three redeliveries failed")
}

func TestDatabaseFaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		run  func(k *faultKit)
	}{
		{"connection killed mid-handler, the next write fails", func(k *faultKit) {
			_, err := k.deliver(k.f.direct, func(ctx context.Context) error {
				require.NoError(k.t, k.credit(ctx))
				id, err := k.f.connID(ctx)
				require.NoError(k.t, err)
				k.f.kill(k.t, id)
				return k.credit(ctx)
			})
			require.Error(k.t, err, "acked a message whose transaction lost its connection")
			k.requireNotApplied()
			k.redeliverUntilAcked(k.f.direct)
			k.requireAppliedOnce()
		}},
		{"connection killed mid-handler, the handler returns nil", func(k *faultKit) {
			_, err := k.deliver(k.f.direct, func(ctx context.Context) error {
				require.NoError(k.t, k.credit(ctx))
				id, err := k.f.connID(ctx)
				require.NoError(k.t, err)
				k.f.kill(k.t, id)
				return nil
			})
			require.Error(k.t, err, "acked a message whose commit could not be sent")
			k.requireNotApplied()
			k.redeliverUntilAcked(k.f.direct)
			k.requireAppliedOnce()
		}},
		{"connection killed while idle in the pool, before BEGIN", func(k *faultKit) {
			store, id := k.f.oneConn(k.t)
			k.inbox(store)
			k.f.kill(k.t, id)
			// The pool may notice the dead connection and open another (ack), or begin on
			// it and fail (nack): either way, never an ack without a commit.
			k.redeliverUntilAcked(store)
			k.requireAppliedOnce()
		}},
		{"connection dropped at BEGIN", func(k *faultKit) {
			fault := k.f.net.Arm(k.f.begin, netfault.BeforeSend)
			k.redeliverUntilAcked(k.f.faulty)
			requireStruck(k.t, k.f.net, fault)
			k.requireAppliedOnce()
		}},
		{"COMMIT lost on its way: not committed", func(k *faultKit) {
			fault := k.f.net.Arm(k.f.commit, netfault.BeforeSend)
			_, err := k.deliver(k.f.faulty, k.credit)
			requireStruck(k.t, k.f.net, fault)
			require.Error(k.t, err, "acked a message whose COMMIT never reached the server")
			k.requireNotApplied()
			k.redeliverUntilAcked(k.f.faulty)
			k.requireAppliedOnce()
		}},
		{"COMMIT executed, its answer lost: committed", func(k *faultKit) {
			fault := k.f.net.Arm(k.f.commit, netfault.AfterReply)
			_, err := k.deliver(k.f.faulty, k.credit)
			requireStruck(k.t, k.f.net, fault)
			require.Error(k.t, err, "the client cannot know the outcome of a commit it got no answer to")
			// The server committed: the redelivery is a duplicate.
			require.Equal(k.t, 1, k.calls)
			k.requireAppliedOnce()
		}},
	}
	for _, b := range faultBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					k := &faultKit{t: t, f: b.open(t), uuid: tableName("msg"), inboxes: map[inbox.Store]*inbox.Inbox{}}
					tc.run(k)
				})
			}
		})
	}
}

// requireStruck checks that fault broke its connection (the delivery that sent its
// command has returned by then), after the server's whole reply for AfterReply.
func requireStruck(t *testing.T, in *netfault.Injector, fault *netfault.Fault) {
	t.Helper()
	require.False(t, in.Disarm(fault), "the fault never struck: the client sent no matching command (%v)", in.Err())
	require.NoError(t, fault.Err())
}
