package inbox

import (
	"context"

	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/mysqlstore"
)

// The MySQL store's entry points. The store lives in package mysqlstore; these names
// are that package's, under the names this package has always given them.

// SQLDB is what the database/sql stores (SQLPostgresStore, MySQLStore, sqlitestore)
// need of a database. *sql.DB satisfies it, and so does *sql.Conn (which serves one
// message at a time).
type SQLDB = sqlstore.DB

// MySQLConfig configures a MySQLStore (see mysqlstore.Config).
type MySQLConfig = mysqlstore.Config

// MySQLStore is a Store on MySQL 8+, MariaDB 10.11+, Vitess or TiDB through
// database/sql and go-sql-driver/mysql (see mysqlstore.Store). Handlers get a *sql.Tx
// from TxFromContext.
type MySQLStore = mysqlstore.Store

// NewMySQLStore returns a MySQLStore over db. It checks the config but not the
// database; New verifies the tables.
func NewMySQLStore(db SQLDB, cfg MySQLConfig) (*MySQLStore, error) { return mysqlstore.New(db, cfg) }

// MySQLEngine is the server behind a MySQLStore (see mysqlstore.Engine).
type MySQLEngine = mysqlstore.Engine

// The engines of MySQLConfig.Engine.
const (
	MySQLInnoDB = mysqlstore.InnoDB // MySQL 8+ or MariaDB 10.11+ with InnoDB tables
	MySQLVitess = mysqlstore.Vitess // a vtgate of Vitess 0.24+ in front of a sharded keyspace
	MySQLTiDB   = mysqlstore.TiDB   // TiDB 8+ in its default pessimistic transaction mode
)

// MySQLEngineOf returns the engine the server behind db says it is.
func MySQLEngineOf(ctx context.Context, db SQLDB) (MySQLEngine, error) {
	return mysqlstore.EngineOf(ctx, db)
}

// MySQLSchema returns the MySQL and MariaDB DDL (schema/mysql.sql) for an inbox table
// named table. It holds several statements: run them one by one, or with a connection
// that allows multiStatements.
func MySQLSchema(table string) (string, error) { return mysqlstore.Schema(table) }
