package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox"
)

// storeFlavours lists every store the conformance suite runs against.
func storeFlavours() []storeFlavour {
	return []storeFlavour{
		pgxFlavour(),
		sqlPostgresFlavour(),
		mysqlFlavour("mariadb", mariaDB, inbox.MySQLConfig{}),
		// REPEATABLE READ, the session's level: the same verdicts, one round trip less.
		mysqlFlavour("mariadb-session-isolation", mariaDB, inbox.MySQLConfig{SessionIsolation: true}),
		mysqlFlavour("mysql", mysqlDB, inbox.MySQLConfig{}),
		vitessFlavour(), // sharded keyspace, two-phase commit: helpers_distsql_test.go
		mysqlFlavour("tidb", tidbDB, inbox.MySQLConfig{Engine: inbox.MySQLTiDB}),
		mysqlFlavour("tidb-repeatable-read", tidbDB, inbox.MySQLConfig{Engine: inbox.MySQLTiDB, Isolation: sql.LevelRepeatableRead}),
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
	return fmt.Errorf("no transaction in the context")
}
