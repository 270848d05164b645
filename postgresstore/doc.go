// Package postgresstore is the inbox's store on PostgreSQL, over pgx (Store) or over
// database/sql with pgx's stdlib driver (SQLStore), on the same tables. Most programs
// reach it through the inbox package's entry points, which are this package's names:
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db:5432/shop")
//	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{}) // postgresstore.New
//	err = store.CreateSchema(ctx)                                      // or run schema/postgres.sql
//	ib, err := inbox.New(inbox.Config{Store: store})
//
//	db, err := sql.Open("pgx", dsn) // _ "github.com/jackc/pgx/v5/stdlib"
//	store, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{}) // postgresstore.NewSQL
//
// Handlers get a pgx.Tx (Store) or a *sql.Tx (SQLStore) from inbox.TxFromContext. The
// package imports pgx and internal/contract, never the inbox package: it implements the
// contract (inbox.Store and its optional abilities) that the inbox calls.
//
// # Files
//
// Every SQL store of this module has the same files, each one concern, so that a new
// dialect is a copy of one folder (docs/architecture.md):
//
//   - store.go, store_sql.go: the configs, the two stores, their statements, the
//     classification of PostgreSQL's errors (ErrContended, ErrNoTable);
//   - claim.go: Claim, ClaimIn and the read of a committed key's stored row;
//     folded.go and folded_batch.go: the one-round-trip claim through pgx (the key's
//     INSERT sent with the BEGIN);
//   - commit.go: the transaction of a claimed key through pgx (database/sql's is
//     internal/sqlstore's);
//   - attempts.go: Config.MaxAttempts: a row and a session advisory lock per delivery;
//   - batch.go, offsets.go: the batch claim (inbox.BatchStore) and offset mode
//     (inbox.OffsetStore);
//   - purge.go, stats.go: PurgeBatch and Forget; Stats, UnfinishedAttempts and
//     NeighbourConsumers;
//   - schema.go: CreateSchema, Verify and the DDL (schema/postgres.sql);
//   - pooler.go: the probe for a pooler that moves transactions (PgBouncer in transaction
//     mode), where pgx's statement cache and MaxAttempts cannot work.
package postgresstore
