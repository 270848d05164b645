// Package sqlx shows sqlx on the inbox transaction.
//
// A *sqlx.Tx wraps a *sql.Tx, so the inbox's transaction becomes one in a line:
//
//	sqlTx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
//	tx := &sqlx.Tx{Tx: sqlTx, Mapper: dbx.Mapper} // dbx: the application's *sqlx.DB
//	err := tx.GetContext(ctx, &wallet, "SELECT id, cents FROM wallets WHERE id = $1", 1)
//
// GetContext, SelectContext and ExecContext work on it as on a Tx from BeginTxx. Its
// driver name, though, is unexported and stays empty, so its Rebind and named queries
// (NamedExecContext, BindNamed) fall back to ? placeholders, which PostgreSQL rejects.
// Compile named queries with the *sqlx.DB, which knows its driver, and run them on the
// transaction:
//
//	query, args, err := dbx.BindNamed("UPDATE wallets SET cents = cents + :cents WHERE id = :id", credit)
//	_, err = tx.ExecContext(ctx, query, args...)
//
// The trap: dbx.ExecContext, dbx.NamedExecContext or a dbx.BeginTxx inside a handler
// write outside the inbox transaction; a redelivery applies them again.
package sqlx
