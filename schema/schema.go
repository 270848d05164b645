// Package schema holds the inbox's DDL for each database, as the files next to it: run
// a file as it is for the default table name "inbox", or take the DDL for another name
// from the store's CreateSchema or inbox.PostgresSchema, MySQLSchema and SQLiteSchema.
// It imports nothing: the stores embed their DDL from here.
//
// The migrations of each dialect, one step per version, are here too (steps.go,
// schema/steps/<dialect>): the one source from which CreateSchema and `inbox migrate up`
// upgrade tables, and from which go generate writes package migrations' files.
package schema

//go:generate go run ./internal/gen

import _ "embed"

var (
	// Postgres is postgres.sql: the tables of the PostgreSQL stores.
	//go:embed postgres.sql
	Postgres string

	// MySQL is mysql.sql: the tables of the MySQL and MariaDB store (and Vitess).
	//go:embed mysql.sql
	MySQL string

	// SQLite is sqlite.sql: the tables of sqlitestore.
	//go:embed sqlite.sql
	SQLite string
)
