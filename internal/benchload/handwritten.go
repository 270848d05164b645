package benchload

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// handWrittenPgx is, on pgx, the SQL the PostgresStore sends for a new key, written by
// hand with none of the library's code: on a connection of the pool, the key's INSERT
// folded into the BEGIN (one simple query, the key quoted), the handler's statements,
// COMMIT. A duplicate key rolls back without running the handler. It is the floor the
// message path is measured against (-compare handwritten:inbox).
func (t *Target) handWrittenPgx(ctx context.Context, key string) error {
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
	return tx.Commit(ctx)
}
