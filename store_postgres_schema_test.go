package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// PostgresConfig.Schema and SearchPath: the tables are named with the schema, whatever
// the session's search_path; with SearchPath, the handler's unqualified names resolve in
// the schema first, and the session's search_path is as it was once the transaction
// ended, after a commit, a duplicate and a rollback alike. A joined transaction keeps
// its owner's search_path.

func TestSearchPathIsLeftAsFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schemas := tenantSchemas(t)
	const sessionPath = "nosuchschema,public"

	handles := map[string]func(t *testing.T, schema string, searchPath bool) pathHandle{
		"pgx-conn": func(t *testing.T, schema string, searchPath bool) pathHandle {
			return pgxPathHandle(t, schema, searchPath, map[string]string{"search_path": sessionPath})
		},
		// Backslashes as escapes: the claim takes the parameterized path, not the folded one.
		"pgx-conn-parameterized": func(t *testing.T, schema string, searchPath bool) pathHandle {
			return pgxPathHandle(t, schema, searchPath, map[string]string{"search_path": sessionPath, "standard_conforming_strings": "off"})
		},
		"sql-conn": func(t *testing.T, schema string, searchPath bool) pathHandle {
			db := openSQL(t, "pgx", pgDSN(t, map[string]string{"search_path": sessionPath}), "PostgreSQL", "INBOX_POSTGRES_DSN")
			conn := sqlConn(t, db)
			store, err := inbox.NewSQLPostgresStore(conn, inbox.SQLPostgresConfig{Schema: schema, SearchPath: searchPath})
			require.NoError(t, err)
			return pathHandle{store: store,
				show: func() string {
					var v string
					require.NoError(t, conn.QueryRowContext(ctx, "SHOW search_path").Scan(&v))
					return v
				},
				begin: func() (any, func()) {
					tx, err := conn.BeginTx(ctx, nil)
					require.NoError(t, err)
					return tx, func() { require.NoError(t, tx.Rollback()) }
				}}
		},
	}
	i := 0
	for name, open := range handles {
		schema := schemas[i]
		i++
		q := pgx.Identifier{schema}.Sanitize()
		t.Run(name, func(t *testing.T) {
			h := open(t, schema, true)
			require.NoError(t, h.store.(interface{ CreateSchema(context.Context) error }).CreateSchema(ctx))
			ib := newTestInbox(t, h.store, inbox.Config{})
			seen := func(key string, fail bool) (string, bool) {
				var inTx string
				dup, err := ib.Process(ctx, "billing", key, func(ctx context.Context) error {
					tx, err := inbox.RequireTx[any](ctx)
					if err == nil {
						inTx, err = queryIn(ctx, tx, "SHOW search_path")
					}
					if err == nil && fail {
						err = errors.New("handler failed")
					}
					return err
				})
				if !fail {
					require.NoError(t, err)
				}
				return inTx, dup
			}
			inTx, dup := seen("order-1", false)
			require.False(t, dup)
			require.Equal(t, q+", "+sessionPath, inTx, "the handler resolves in the schema first, then the session's path")
			require.Equal(t, sessionPath, h.show(), "after a commit")
			_, dup = seen("order-1", false)
			require.True(t, dup)
			require.Equal(t, sessionPath, h.show(), "after a duplicate")
			inTx, _ = seen("order-2", true)
			require.Equal(t, q+", "+sessionPath, inTx)
			require.Equal(t, sessionPath, h.show(), "after a rollback")

			// A joined transaction keeps the search_path its owner set; the key still goes to
			// the schema's table.
			tx, end := h.begin()
			require.NoError(t, execIn(ctx, tx, "SET LOCAL search_path TO public"))
			var joined string
			dup, err := ib.Process(inbox.ContextWithTx(ctx, tx), "billing", "order-3", func(ctx context.Context) error {
				var err error
				joined, err = queryIn(ctx, tx, "SHOW search_path")
				return err
			})
			require.NoError(t, err)
			require.False(t, dup)
			require.Equal(t, "public", joined)
			end()
			require.Equal(t, sessionPath, h.show())

			// An empty session search_path: the schema alone.
			require.NoError(t, execSession(ctx, h, "SET search_path = ''"))
			inTx, _ = seen("order-4", false)
			require.Equal(t, q, inTx)

			// Without SearchPath, the handler's statements resolve through the session's path,
			// and the store still finds its tables in the schema.
			plain := newTestInbox(t, open(t, schema, false).store, inbox.Config{})
			var path string
			dup, err = plain.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
				tx, err := inbox.RequireTx[any](ctx)
				if err == nil {
					path, err = queryIn(ctx, tx, "SHOW search_path")
				}
				return err
			})
			require.NoError(t, err)
			require.True(t, dup, "the key committed above, in the schema's table")
			require.Empty(t, path, "a duplicate runs no handler")
		})
	}
}

// pathHandle is a store on one connection, with what the test reads and begins there.
type pathHandle struct {
	store inbox.Store
	// show reads the session's search_path outside any transaction.
	show func() string
	// begin begins an owner's transaction on the store's connection.
	begin func() (any, func())
}

// execSession runs a session statement on h's connection, in an owner's transaction
// that commits it (SET without LOCAL outlives the transaction).
func execSession(ctx context.Context, h pathHandle, stmt string) error {
	tx, _ := h.begin()
	if err := execIn(ctx, tx, stmt); err != nil {
		return err
	}
	switch tx := tx.(type) {
	case pgx.Tx:
		return tx.Commit(ctx)
	case *sql.Tx:
		return tx.Commit()
	}
	return nil
}

func TestSchemaConfig(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	for _, tc := range []struct {
		cfg  inbox.PostgresConfig
		want string
	}{
		{inbox.PostgresConfig{SearchPath: true}, "SearchPath is set without Schema"},
		{inbox.PostgresConfig{Schema: "tenant-a"}, `Schema "tenant-a" is not a valid schema name`},
		{inbox.PostgresConfig{Schema: `a"; DROP TABLE x; --`}, "is not a valid schema name"},
	} {
		_, err := inbox.NewPostgresStore(pool, tc.cfg)
		require.ErrorContains(t, err, tc.want)
		_, err = inbox.NewSQLPostgresStore(sqlPostgresDB(t), inbox.SQLPostgresConfig{Schema: tc.cfg.Schema, SearchPath: tc.cfg.SearchPath})
		require.ErrorContains(t, err, tc.want)
	}
}

// pgxPathHandle is a PostgresStore on one *pgx.Conn with session settings.
func pgxPathHandle(t *testing.T, schema string, searchPath bool, settings map[string]string) pathHandle {
	ctx := context.Background()
	conn := pgConn(t, pgDSN(t, settings))
	store, err := inbox.NewPostgresStore(conn, inbox.PostgresConfig{Schema: schema, SearchPath: searchPath})
	require.NoError(t, err)
	return pathHandle{store: store,
		show: func() string {
			var v string
			require.NoError(t, conn.QueryRow(ctx, "SHOW search_path").Scan(&v))
			return v
		},
		begin: func() (any, func()) {
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			return tx, func() { require.NoError(t, tx.Rollback(ctx)) }
		}}
}
