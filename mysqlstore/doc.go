// Package mysqlstore is the inbox's store on MySQL 8+, MariaDB 10.11+, Vitess and TiDB,
// over database/sql with github.com/go-sql-driver/mysql. Most programs reach it through
// the inbox package's entry points, which are this package's names:
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/shop") // any DSN
//	store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{})   // mysqlstore.New
//	err = store.CreateSchema(ctx)                                // or run schema/mysql.sql
//	ib, err := inbox.New(inbox.Config{Store: store})
//
// Handlers get a *sql.Tx from inbox.TxFromContext. Config.Engine (or inbox.MySQLEngineOf)
// selects what differs on Vitess and TiDB (engines.go). The package imports
// database/sql, the driver (for its error numbers) and internal/contract, never the
// inbox package: it implements the contract (inbox.Store and its optional abilities)
// that the inbox calls.
//
// # Files
//
// Every SQL store of this module has the same files, each one concern, so that a new
// dialect is a copy of one folder (docs/architecture.md):
//
//   - store.go: the config, the store, its statements, the classification of the
//     server's errors (ErrContended, ErrNoTable);
//   - claim.go: Claim, ClaimIn and the read of a committed key's stored row;
//   - commit.go: the output stored with the key (the transaction is internal/sqlstore's);
//   - attempts.go: Config.MaxAttempts: a row and a GET_LOCK per delivery;
//   - batch.go, offsets.go: the batch claim (inbox.BatchStore) and offset mode
//     (inbox.OffsetStore; not on Vitess);
//   - purge.go, stats.go: PurgeBatch and Forget; Stats, UnfinishedAttempts and
//     NeighbourConsumers;
//   - schema.go: CreateSchema, Verify and the DDL (schema/mysql.sql, schema/tidb.sql,
//     the Vitess VSchema);
//   - engines.go, session.go: Vitess and TiDB, and the session's isolation level.
package mysqlstore
