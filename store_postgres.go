package inbox

import "github.com/watermill-inbox/inbox/postgresstore"

// The PostgreSQL stores' entry points. The stores live in package postgresstore; these
// names are that package's, under the names this package has always given them.

// PgxDB is what PostgresStore needs of a database: *pgxpool.Pool, *pgx.Conn or
// *pgxpool.Conn.
type PgxDB = postgresstore.PgxDB

// PostgresConfig configures a PostgresStore (see postgresstore.Config).
type PostgresConfig = postgresstore.Config

// PostgresStore is a Store on PostgreSQL through pgx (see postgresstore.Store).
// Handlers get a pgx.Tx from TxFromContext.
type PostgresStore = postgresstore.Store

// NewPostgresStore returns a PostgresStore over db. It checks the config but not the
// database; New verifies the tables.
func NewPostgresStore(db PgxDB, cfg PostgresConfig) (*PostgresStore, error) {
	return postgresstore.New(db, cfg)
}

// SQLPostgresConfig configures a SQLPostgresStore (see postgresstore.SQLConfig).
type SQLPostgresConfig = postgresstore.SQLConfig

// SQLPostgresStore is a Store on PostgreSQL through database/sql and pgx's stdlib
// driver (see postgresstore.SQLStore). Handlers get a *sql.Tx from TxFromContext.
type SQLPostgresStore = postgresstore.SQLStore

// NewSQLPostgresStore returns a SQLPostgresStore over db, a *sql.DB (or *sql.Conn) of
// pgx's stdlib driver. It checks the config but not the database; New verifies the
// tables.
func NewSQLPostgresStore(db SQLDB, cfg SQLPostgresConfig) (*SQLPostgresStore, error) {
	return postgresstore.NewSQL(db, cfg)
}

// PostgresSchema returns the PostgreSQL DDL (schema/postgres.sql) for an inbox table
// named table.
func PostgresSchema(table string) (string, error) { return postgresstore.Schema(table) }
