package benchload

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// handWrittenPgx is, on pgx, the SQL the PostgresStore sends for a new key, written by
// hand with none of the library's code: on a connection of the pool, the key's INSERT
// folded into the BEGIN (one simple query, the key quoted), the handler's statements,
// then, with an output, its UPDATE and COMMIT in one round trip (a batch), else COMMIT.
// A duplicate key rolls back without running the handler and, with an output, reads
// the stored one, as the store does (replayed). It is the floor the message
// path is measured against (-compare handwritten:inbox), and inboxhttp's with an output.
//
// fingerprint, when not nil, goes into the INSERT as the store writes it, a hex bytea
// literal (HandWrittenFP); nil writes NULL, as Inbox.Process and ProcessResult without
// one do.
func (t *Target) handWrittenPgx(ctx context.Context, key string, output, fingerprint []byte) (stored []byte, replayed bool, err error) {
	c, err := t.Pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	defer c.Release()
	fp := "NULL"
	if fingerprint != nil {
		fp = `'\x` + hex.EncodeToString(fingerprint) + `'::bytea`
	}
	begin := "begin isolation level read committed; INSERT INTO " + pgx.Identifier{t.InboxTable}.Sanitize() +
		" (consumer, key, fingerprint) VALUES ('handwritten', '" + strings.ReplaceAll(key, "'", "''") + "', " + fp + ")"
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, BeginQuery: begin})
	if err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			return nil, false, err
		}
		if output == nil {
			_, err = c.Exec(ctx, "ROLLBACK")
			return nil, true, err
		}
		// A replay: the rollback and the read of the stored response in one round trip.
		results, err := c.Conn().PgConn().Exec(ctx, "ROLLBACK; SELECT encode(output, 'hex') FROM "+pgx.Identifier{t.InboxTable}.Sanitize()+
			" WHERE consumer = 'handwritten' AND key = '"+strings.ReplaceAll(key, "'", "''")+"'").ReadAll()
		if err != nil {
			return nil, true, err
		}
		if len(results) != 2 || len(results[1].Rows) != 1 {
			return nil, true, fmt.Errorf("handwritten: no stored row for %s", key)
		}
		stored, err := hex.DecodeString(string(results[1].Rows[0][0]))
		return stored, true, err
	}
	if err := t.work(ctx, tx, key); err != nil {
		return nil, false, errors.Join(err, tx.Rollback(ctx))
	}
	if output == nil {
		return nil, false, tx.Commit(ctx)
	}
	batch := &pgx.Batch{}
	batch.Queue("UPDATE "+pgx.Identifier{t.InboxTable}.Sanitize()+" SET output = $3 WHERE consumer = $1 AND key = $2", "handwritten", key, output)
	batch.Queue("commit")
	if err := c.SendBatch(ctx, batch).Close(); err != nil {
		return nil, false, errors.Join(err, tx.Rollback(ctx))
	}
	return nil, false, nil
}

// HandWrittenHTTP is the SQL inboxhttp sends for a request, written by hand: the key's
// INSERT, the handler's statements, the response's UPDATE and the COMMIT; for a key
// already there (replayed), the refused INSERT, the read of the stored response and the
// ROLLBACK: the claim path of a replay, as a key the Inbox does not remember takes it.
// On pgx see handWrittenPgx; on MariaDB and MySQL, as the MySQLStore sends them: its
// statements prepared once per connection, and SET TRANSACTION ISOLATION LEVEL READ
// COMMITTED before the START TRANSACTION unless the session is there already. The pair
// inboxhttp / HandWrittenHTTP is the library's own cost on the HTTP path,
// HandWrittenHTTP / Baseline the floor of its SQL.
func (t *Target) HandWrittenHTTP(ctx context.Context, key string, output []byte) (stored []byte, replayed bool, err error) {
	if t.Flavour == "pgx" {
		return t.handWrittenPgx(ctx, key, output, nil)
	}
	if !t.mysql() {
		return nil, false, fmt.Errorf("handwritten HTTP: pgx, mariadb or mysql, not %s", t.Flavour)
	}
	t.hwOnce.Do(func() { t.hwErr = t.prepareHandWritten(ctx) })
	if t.hwErr != nil {
		return nil, false, t.hwErr
	}
	tx, err := t.DB.BeginTx(ctx, t.hwOpts)
	if err != nil {
		return nil, false, err
	}
	_, err = tx.StmtContext(ctx, t.hwInsert).ExecContext(ctx, "handwritten", key, nil)
	if myErr := (*mysql.MySQLError)(nil); errors.As(err, &myErr) && myErr.Number == 1062 { // a duplicate
		err = tx.StmtContext(ctx, t.hwStored).QueryRowContext(ctx, "handwritten", key).Scan(&stored)
		return stored, true, errors.Join(err, tx.Rollback())
	}
	if err == nil {
		err = t.work(ctx, tx, key)
	}
	if err == nil {
		_, err = tx.StmtContext(ctx, t.hwOutput).ExecContext(ctx, output, "handwritten", key)
	}
	if err != nil {
		return nil, false, errors.Join(err, tx.Rollback())
	}
	return nil, false, tx.Commit()
}

// prepareHandWritten prepares HandWrittenHTTP's statements on MariaDB or MySQL and asks
// the session's isolation level once, as the MySQLStore does (ADR 120).
func (t *Target) prepareHandWritten(ctx context.Context) error {
	var level string
	if err := t.DB.QueryRowContext(ctx, "SELECT @@SESSION.transaction_isolation").Scan(&level); err != nil {
		if err := t.DB.QueryRowContext(ctx, "SELECT @@SESSION.tx_isolation").Scan(&level); err != nil {
			return err
		}
	}
	if level != "READ-COMMITTED" {
		t.hwOpts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	table := t.quote(t.InboxTable)
	var err error
	if t.hwInsert, err = t.DB.PrepareContext(ctx, "INSERT INTO "+table+" (`consumer`, `key`, `fingerprint`) VALUES (?, ?, ?)"); err != nil {
		return err
	}
	if t.hwOutput, err = t.DB.PrepareContext(ctx, "UPDATE "+table+" SET `output` = ? WHERE `consumer` = ? AND `key` = ?"); err != nil {
		return err
	}
	t.hwStored, err = t.DB.PrepareContext(ctx, "SELECT `output` FROM "+table+" WHERE `consumer` = ? AND `key` = ?")
	return err
}

// HandWrittenFP is HandWritten on pgx with the fingerprint the middleware stores by
// default for an empty payload (its SHA-256) in the key's INSERT: the same SQL as the
// middleware's message path, with none of the library's code.
func (t *Target) HandWrittenFP(ctx context.Context, key string) error {
	if t.Flavour != "pgx" {
		return fmt.Errorf("handwrittenfp: pgx only, not %s", t.Flavour)
	}
	_, _, err := t.handWrittenPgx(ctx, key, nil, emptyPayloadFingerprint)
	return err
}

// HandWrittenHTTPMulti is HandWrittenHTTP on MariaDB or MySQL with the fewest round
// trips the SQL allows, which database/sql and go-sql-driver/mysql do not let a library
// send: on a connection of a handle whose DSN has multiStatements=true, without a
// *sql.Tx, the transaction begun by hand with the key's INSERT in the same query
// ([SET TRANSACTION ISOLATION LEVEL READ COMMITTED;] START TRANSACTION; INSERT), the
// handler's statements, then the response's UPDATE and the COMMIT in one query. It is
// the floor of what inboxhttp's SQL could reach on these servers, measured: the store
// cannot send it, since a handler needs a *sql.Tx (whose BeginTx sends START
// TRANSACTION on its own and whose Commit sends COMMIT on its own), and a multi-statement
// query needs the flag in the user's DSN. New keys only (the benchmark's first requests).
func (t *Target) HandWrittenHTTPMulti(ctx context.Context, key string, output []byte) error {
	if !t.mysql() {
		return fmt.Errorf("handwritten multi: mariadb or mysql, not %s", t.Flavour)
	}
	t.multiOnce.Do(func() { t.multiErr = t.openMulti(ctx) })
	if t.multiErr != nil {
		return t.multiErr
	}
	conn, err := t.multi.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	table := t.quote(t.InboxTable)
	where := " WHERE `consumer` = 'handwritten' AND `key` = " + mysqlLiteral(key)
	begin := "START TRANSACTION; INSERT INTO " + table + " (`consumer`, `key`, `fingerprint`) VALUES ('handwritten', " + mysqlLiteral(key) + ", NULL)"
	if !t.multiRC {
		begin = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; " + begin
	}
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		_, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return errors.Join(err, rbErr)
	}
	if err := t.work(ctx, conn, key); err != nil {
		_, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return errors.Join(err, rbErr)
	}
	_, err = conn.ExecContext(ctx, "UPDATE "+table+" SET `output` = X'"+hex.EncodeToString(output)+"'"+where+"; COMMIT")
	if err != nil {
		_, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return errors.Join(err, rbErr)
	}
	return nil
}

// openMulti opens HandWrittenHTTPMulti's handle and asks the session's isolation level.
func (t *Target) openMulti(ctx context.Context) error {
	_, dsn := DSN(t.Flavour)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	cfg.MultiStatements = true
	if t.multi, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		return err
	}
	t.multi.SetMaxOpenConns(20)
	t.multi.SetMaxIdleConns(20)
	var level string
	if err := t.multi.QueryRowContext(ctx, "SELECT @@SESSION.transaction_isolation").Scan(&level); err != nil {
		if err := t.multi.QueryRowContext(ctx, "SELECT @@SESSION.tx_isolation").Scan(&level); err != nil {
			return err
		}
	}
	t.multiRC = level == "READ-COMMITTED"
	return nil
}

// mysqlLiteral quotes s as a MySQL string literal (the benchmark's keys are letters,
// digits and dashes; quotes and backslashes are escaped all the same).
func mysqlLiteral(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}

// HandWrittenHTTPSimple is HandWrittenHTTP on pgx with the response's UPDATE and the
// COMMIT sent as one multi-statement simple query (the output as a hex literal), where
// the store pipelines them as one extended-protocol batch: both are one round trip, and
// the pair says which costs the server less. New keys only.
func (t *Target) HandWrittenHTTPSimple(ctx context.Context, key string, output []byte) error {
	if t.Flavour != "pgx" {
		return fmt.Errorf("handwritten simple: pgx only, not %s", t.Flavour)
	}
	c, err := t.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	table := pgx.Identifier{t.InboxTable}.Sanitize()
	quoted := "'" + strings.ReplaceAll(key, "'", "''") + "'"
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted,
		BeginQuery: "begin isolation level read committed; INSERT INTO " + table + " (consumer, key, fingerprint) VALUES ('handwritten', " + quoted + ", NULL)"})
	if err != nil {
		return err
	}
	if err := t.work(ctx, tx, key); err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	// The transaction ends in this query: tx is not used again, and the connection goes
	// back to the pool idle.
	_, err = c.Conn().PgConn().Exec(ctx, "UPDATE "+table+` SET output = '\x`+hex.EncodeToString(output)+"'::bytea WHERE consumer = 'handwritten' AND key = "+quoted+"; COMMIT").ReadAll()
	if err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	return nil
}
