package inbox_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// On vtgate, SET TRANSACTION ISOLATION LEVEL (which database/sql sends for BeginTx with
// a level) stays in force on the connection. The store with MySQLVitess leaves the
// connection's level as it found it; a plain BeginTx at READ COMMITTED, the control,
// does not.
func TestVitessLeavesIsolationAsFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := vitessDB(t)
	table := tableName("inbox")
	vschemaMu.Lock()
	newMySQLStore(t, db, inbox.MySQLConfig{Table: table, Engine: inbox.MySQLVitess})
	vschemaMu.Unlock()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	// level returns the isolation level a default transaction on conn runs at.
	level := func() string {
		tx, err := conn.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		var l string
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT @@transaction_isolation").Scan(&l))
		return l
	}
	before := level()

	// The store's transactions on this very connection: a claim, its commit, an attempt.
	onConn, err := inbox.NewMySQLStore(conn, inbox.MySQLConfig{Table: table, Engine: inbox.MySQLVitess})
	require.NoError(t, err)
	claim, err := onConn.Claim(ctx, inbox.Record{Consumer: "billing", Key: "iso-1", Attempt: "a"})
	require.NoError(t, err)
	require.NoError(t, claim.Tx.Commit(ctx, nil))
	require.Equal(t, before, level(), "the inbox left the connection's level as it found it")

	// The control: a transaction begun at READ COMMITTED changes the level of the next.
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.NotEqual(t, before, level(), "vtgate keeps SET TRANSACTION on the connection (the reason for MySQLVitess's behaviour)")
	_, err = conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL "+map[string]string{
		"REPEATABLE-READ": "REPEATABLE READ", "READ-COMMITTED": "READ COMMITTED",
	}[before])
	require.NoError(t, err)
}

// New refuses vtgate's default MULTI mode unless told otherwise.
func TestVitessRefusesBestEffortCommit(t *testing.T) {
	t.Parallel()
	db := vitessDB(t)
	table := tableName("inbox")
	vschemaMu.Lock()
	newMySQLStore(t, db, inbox.MySQLConfig{Table: table, Engine: inbox.MySQLVitess})
	vschemaMu.Unlock()
	multi := openSQL(t, "mysql", withDSNParams(t, os.Getenv("INBOX_VITESS_DSN"), map[string]string{"transaction_mode": "'MULTI'"}), "Vitess", "INBOX_VITESS_DSN")
	for _, allow := range []bool{false, true} {
		st, err := inbox.NewMySQLStore(multi, inbox.MySQLConfig{Table: table, Engine: inbox.MySQLVitess, AllowBestEffortCommit: allow})
		require.NoError(t, err)
		_, err = inbox.New(inbox.Config{Store: st, Consumer: "billing"})
		if allow {
			require.NoError(t, err)
		} else {
			require.ErrorContains(t, err, "transaction_mode is MULTI")
		}
	}
	_, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Engine: inbox.MySQLVitess, Isolation: sql.LevelReadCommitted})
	require.ErrorContains(t, err, "Isolation is Read Committed and Engine is MySQLVitess")
}
