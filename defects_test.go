package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// Claims cancelled at random moments, with LockTimeout on MySQL and MariaDB, never leave
// a pooled connection with the inbox's innodb_lock_wait_timeout: each connection keeps
// the session's own value, set at connect.
func TestLockTimeout_CancelledClaimsLeaveTheSessionValue(t *testing.T) {
	t.Parallel()
	for _, server := range mysqlServers() {
		t.Run(server.name, func(t *testing.T) {
			t.Parallel()
			const conns = 4
			db := mysqlOpener(server.dsn)(t)
			db.SetMaxOpenConns(conns)
			db.SetMaxIdleConns(conns)
			store := newMySQLStore(t, db, inbox.MySQLConfig{LockTimeout: time.Second})
			ib := newTestInbox(t, store, inbox.Config{})

			var wg sync.WaitGroup
			for w := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 100 {
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
						_, _ = ib.Process(ctx, "billing", tableName("order"), func(context.Context) error { return nil })
						cancel()
						_ = w + i
					}
				}()
			}
			wg.Wait()

			// Hold every pooled connection at once and read each one's value.
			held := make([]*sql.Conn, conns)
			for i := range held {
				c, err := db.Conn(context.Background())
				require.NoError(t, err)
				held[i] = c
			}
			for i, c := range held {
				var v string
				require.NoError(t, c.QueryRowContext(context.Background(), "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&v))
				require.Equal(t, mySessionLock, v, "connection %d", i)
				require.NoError(t, c.Close())
			}
		})
	}
}

// The same bound on PostgreSQL leaves the session's own lock_timeout in the handler and
// after the claim, with the folded claim and the parameterized one (a joined
// transaction), and on database/sql.
func TestLockTimeout_OnlyForTheInboxStatementKeepsTheSessionValue(t *testing.T) {
	t.Parallel()
	for _, f := range []storeFlavour{pgxFlavour(), pgxConnFlavour(), sqlPostgresFlavour()} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			fx := f.open(t, storeOpts{lockTimeout: 250 * time.Millisecond})
			ib := newTestInbox(t, fx.store, inbox.Config{})
			for _, joined := range []bool{false, true} {
				ctx := context.Background()
				var end func(bool) error
				if joined {
					var tx any
					tx, end = fx.beginOther(t)
					ctx = inbox.ContextWithTx(ctx, tx)
				}
				var inHandler string
				_, err := ib.Process(ctx, "orders", tableName("order"), func(ctx context.Context) error {
					tx, err := inbox.RequireTx[any](ctx)
					if err == nil {
						inHandler, err = fx.lock.read(ctx, tx)
					}
					return err
				})
				require.NoError(t, err)
				require.Equal(t, pgSessionLock, inHandler, "joined %v", joined)
				if end != nil {
					require.NoError(t, end(true))
				}
			}
		})
	}
}

// A handler that produces more than Config.MaxOutputBytes fails clearly, rolled back,
// and so does output over MySQL's max_allowed_packet when the limit is raised past it.
func TestOutputTooLarge(t *testing.T) {
	t.Parallel()
	big := func(n int) message.HandlerFunc {
		return func(*message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage("out-1", make([]byte, n))}, nil
		}
	}
	t.Run("MaxOutputBytes", func(t *testing.T) {
		t.Parallel()
		pool := pgPool(t)
		l := newPgLedger(t, pool)
		ib := newTestInbox(t, newPgxStore(t, pool, inbox.PostgresConfig{}), inbox.Config{MaxOutputBytes: 1000})
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			require.NoError(t, l.credit(msg.Context(), 1))
			return big(2000)(msg)
		})
		_, err := h(message.NewMessage("order-1", nil))
		require.ErrorIs(t, err, inbox.ErrOutputTooLarge)
		require.Contains(t, err.Error(), "MaxOutputBytes (1000)")
		total, _ := l.balance(t)
		require.Zero(t, total, "rolled back")
	})
	t.Run("MariaDBPacketLimit", func(t *testing.T) {
		t.Parallel()
		db := mariaDB(t)
		var packet int
		require.NoError(t, db.QueryRow("SELECT @@max_allowed_packet").Scan(&packet))
		ib := newTestInbox(t, newMySQLStore(t, db, inbox.MySQLConfig{}), inbox.Config{MaxOutputBytes: 4 * packet})
		_, err := ib.Middleware(big(2 * packet))(message.NewMessage("order-1", nil))
		require.ErrorIs(t, err, inbox.ErrOutputTooLarge)
		require.Contains(t, err.Error(), "max_allowed_packet")
	})
	t.Run("InvalidConfig", func(t *testing.T) {
		t.Parallel()
		_, err := inbox.New(inbox.Config{Store: newPgxStore(t, pgPool(t), inbox.PostgresConfig{}), MaxOutputBytes: -1})
		require.ErrorContains(t, err, "MaxOutputBytes is -1")
	})
}

// RequireTx names what the context holds.
func TestRequireTx(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	ib := newTestInbox(t, newPgxStore(t, pool, inbox.PostgresConfig{}), inbox.Config{})
	_, err := ib.Process(context.Background(), "billing", "order-1", func(ctx context.Context) error {
		tx, err := inbox.RequireTx[pgx.Tx](ctx)
		require.NoError(t, err)
		require.NotNil(t, tx)
		_, err = inbox.RequireTx[*sql.Tx](ctx)
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.Contains(t, err.Error(), "asked for a *sql.Tx, but the context holds a pgx.Tx")
		require.Contains(t, err.Error(), "inbox.TxFromContext[pgx.Tx]")
		return nil
	})
	require.NoError(t, err)
	_, err = inbox.RequireTx[pgx.Tx](context.Background())
	require.ErrorIs(t, err, inbox.ErrNoTx)
	require.Contains(t, err.Error(), "holds no inbox transaction")
}

// No error the inbox returns says "inbox:" twice, and one whose message context ended
// says so and what to change.
func TestErrorsSayInboxOnce(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	store := newPgxStore(t, pool, inbox.PostgresConfig{LockTimeout: 100 * time.Millisecond})
	db := mariaDB(t)
	mysqlStore := newMySQLStore(t, db, inbox.MySQLConfig{})
	var errs []error
	collect := func(err error) {
		require.Error(t, err)
		errs = append(errs, err)
	}
	ctx := context.Background()
	for _, s := range []inbox.Store{store, mysqlStore} {
		ib := newTestInbox(t, s, inbox.Config{OnDuplicate: inbox.Fail, MaxAttempts: 1})
		// The message context ends before the commit.
		cctx, cancel := context.WithCancel(ctx)
		_, err := ib.Process(cctx, "billing", "order-1", func(context.Context) error { cancel(); return nil })
		collect(err)
		require.ErrorIs(t, err, context.Canceled)
		require.Contains(t, err.Error(), "the message context ended")
		require.Contains(t, err.Error(), "AckWaitTimeout")
		// A context cancelled before anything.
		_, err = ib.Process(cctx, "billing", "order-2", func(context.Context) error { return nil })
		collect(err)
		// A deadline during the claim's wait.
		holding, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			_, _ = newTestInbox(t, s, inbox.Config{}).Process(ctx, "billing", "order-3", func(context.Context) error {
				close(holding)
				<-release
				return errors.New("first fails")
			})
		}()
		<-holding
		dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = ib.Process(dctx, "billing", "order-3", func(context.Context) error { return nil })
		dcancel()
		close(release)
		<-done
		collect(err)
		// A duplicate refused; a message without a key; too many attempts.
		_, err = ib.Process(ctx, "billing", "order-4", func(context.Context) error { return nil })
		require.NoError(t, err)
		_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(message.NewMessage("order-4", nil))
		collect(err)
		_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(message.NewMessage("", nil))
		collect(err)
		crashedAttempt(t, context.Background(), s, "billing", "order-5")
		_, err = ib.Process(ctx, "billing", "order-5", func(context.Context) error { return nil })
		collect(err)
		require.ErrorIs(t, err, inbox.ErrTooManyAttempts)
		// A handler that ends the transaction.
		_, err = ib.Process(ctx, "billing", "order-6", func(ctx context.Context) error { return endTx(t, ctx) })
		collect(err)
		// A duplicate with another fingerprint, refused; no key from any of two key
		// functions, for a message without a UUID (issue 23).
		strict := newTestInbox(t, s, inbox.Config{OnMismatch: inbox.Fail, Key: inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromMetadata("event_id"))})
		nop := func(*message.Message) ([]*message.Message, error) { return nil, nil }
		_, err = strict.Middleware(nop)(message.NewMessage("order-9", []byte("a")))
		require.NoError(t, err)
		_, err = strict.Middleware(nop)(message.NewMessage("order-9", []byte("b")))
		collect(err)
		require.ErrorIs(t, err, inbox.ErrFingerprintMismatch)
		_, err = strict.ProcessResult(ctx, "billing", "order-9", []byte("c"), func(context.Context) ([]byte, error) { return nil, nil })
		collect(err)
		require.ErrorIs(t, err, inbox.ErrDuplicate)
		_, err = strict.Middleware(nop)(message.NewMessage("", nil))
		collect(err)
		require.ErrorIs(t, err, inbox.ErrNoKey)
		require.Contains(t, err.Error(), "message without a UUID")
	}
	// Contended past the lock timeout, on PostgreSQL.
	ib := newTestInbox(t, store, inbox.Config{})
	holding, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, _ = ib.Process(ctx, "billing", "order-7", func(context.Context) error { close(holding); <-release; return nil })
	}()
	<-holding
	_, err := ib.Process(ctx, "billing", "order-7", func(context.Context) error { return nil })
	close(release)
	<-done
	collect(err)
	require.ErrorIs(t, err, inbox.ErrContended)
	// A missing table, an invalid config, a joined transaction refused.
	_, err = inbox.New(inbox.Config{Store: pgxFlavour().missing(t), Consumer: "billing"})
	collect(err)
	_, err = inbox.New(inbox.Config{Store: store, MaxAttempts: -1, OnDuplicate: 7})
	collect(err)
	conn := pgConn(t, postgresDSN())
	connStore, err := inbox.NewPostgresStore(conn, inbox.PostgresConfig{Table: tableName("inbox")})
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = connStore.ClaimIn(inbox.ContextWithTx(ctx, tx), tx, attemptOf("billing", "order-8"))
	collect(err)
	require.ErrorIs(t, err, inbox.ErrAttemptsNeedConn)
	require.NoError(t, tx.Rollback(ctx))

	_, err = inbox.New(inbox.Config{MaxAttempts: -1}) // two fields at once
	collect(err)
	for _, err := range errs {
		require.Equal(t, 1, strings.Count(err.Error(), "inbox:"), "%q", err.Error())
		require.True(t, strings.HasPrefix(err.Error(), "inbox: "), "%q", err.Error())
		require.NotContains(t, err.Error(), "\n", "one line")
		require.NotContains(t, err.Error(), "message :", "a message without a UUID is named as such")
		require.LessOrEqual(t, strings.Count(err.Error(), inbox.ErrNoKey.Error()), 1, "%q", err.Error())
	}
}
