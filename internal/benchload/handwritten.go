package benchload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// handWrittenPgx is, on pgx, the SQL the PostgresStore sends for a new key, written by
// hand with none of the library's code: on a connection of the pool, the key's INSERT
// folded into the BEGIN (one simple query, the key quoted), the handler's statements,
// then, with an output, its UPDATE and COMMIT in one round trip (a batch), else COMMIT.
// A duplicate key rolls back without running the handler. It is the floor the message
// path is measured against (-compare handwritten:inbox), and inboxhttp's with an output.
func (t *Target) handWrittenPgx(ctx context.Context, key string, output []byte) error {
	c, err := t.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	begin := "begin isolation level read committed; INSERT INTO " + pgx.Identifier{t.InboxTable}.Sanitize() +
		" (consumer, key, fingerprint) VALUES ('handwritten', '" + strings.ReplaceAll(key, "'", "''") + "', NULL)"
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, BeginQuery: begin})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			_, err = c.Exec(ctx, "ROLLBACK")
		}
		return err
	}
	if err := t.work(ctx, tx, key); err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	if output == nil {
		return tx.Commit(ctx)
	}
	batch := &pgx.Batch{}
	batch.Queue("UPDATE "+pgx.Identifier{t.InboxTable}.Sanitize()+" SET output = $3 WHERE consumer = $1 AND key = $2", "handwritten", key, output)
	batch.Queue("commit")
	if err := c.SendBatch(ctx, batch).Close(); err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	return nil
}

// HandWrittenHTTP is the SQL inboxhttp sends for a new request, written by hand: the
// key's INSERT, the handler's statements, the response's UPDATE and the COMMIT. On pgx
// see handWrittenPgx; on MariaDB and MySQL, as the MySQLStore sends them: the key's
// INSERT and the UPDATE prepared once per connection, and SET TRANSACTION ISOLATION
// LEVEL READ COMMITTED before the START TRANSACTION unless the session is there already.
// The pair inboxhttp / HandWrittenHTTP is the library's own cost on the HTTP path,
// HandWrittenHTTP / Baseline the floor of its SQL.
func (t *Target) HandWrittenHTTP(ctx context.Context, key string, output []byte) error {
	if t.Flavour == "pgx" {
		return t.handWrittenPgx(ctx, key, output)
	}
	if !t.mysql() {
		return fmt.Errorf("handwritten HTTP: pgx, mariadb or mysql, not %s", t.Flavour)
	}
	t.hwOnce.Do(func() { t.hwErr = t.prepareHandWritten(ctx) })
	if t.hwErr != nil {
		return t.hwErr
	}
	tx, err := t.DB.BeginTx(ctx, t.hwOpts)
	if err != nil {
		return err
	}
	if _, err := tx.StmtContext(ctx, t.hwInsert).ExecContext(ctx, "handwritten", key, nil); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	if err := t.work(ctx, tx, key); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	if _, err := tx.StmtContext(ctx, t.hwOutput).ExecContext(ctx, output, "handwritten", key); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
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
	t.hwOutput, err = t.DB.PrepareContext(ctx, "UPDATE "+table+" SET `output` = ? WHERE `consumer` = ? AND `key` = ?")
	return err
}
