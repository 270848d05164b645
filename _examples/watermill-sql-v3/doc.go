// Package v3 tests watermill-sql v3, the version the design names, with the inbox:
//
//   - a v3 publisher on the inbox's *sql.Tx (SQLPostgresStore, MySQLStore), in the
//     Forwarder's envelope, and a v3 Forwarder moving the rows to the broker;
//   - the v4 outbox package writing into a table a v3 subscriber created, and a v3
//     Forwarder moving those rows.
//
// The binding is one line, because *sql.Tx satisfies v3's ContextExecutor:
//
//	tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
//	pub, err := sql.NewPublisher(tx, sql.PublisherConfig{SchemaAdapter: sql.DefaultPostgreSQLSchema{}}, logger)
//	err = forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: "outbox"}).Publish("cashback", event)
//
// A pgx.Tx (PostgresStore) does not satisfy it (v3 has no pgx adapter; v4 added
// TxFromPgx): on pgx, use the v4 outbox package, or the database/sql store on pgx's
// stdlib driver. It is a module of its own so that v3 does not enter the root module.
package v3
