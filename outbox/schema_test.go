package outbox_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/outbox"
)

// InitializeSchema creates the outbox table without a watermill-sql subscriber, on
// PostgreSQL (through pgx, in a transaction under the adapter's advisory lock) and on
// MariaDB (database/sql, sql.DefaultMySQLSchema); running it again changes nothing, and a
// handler behind the inbox then publishes into it.
func TestInitializeSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range sqltest.Databases() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			db := d.Open(t)
			cfg := outbox.Config{ForwarderTopic: sqltest.Name("outbox")}
			beginner := sql.BeginnerFromStdSQL(db)
			if d.Dialect == sqltest.MySQL {
				cfg.SchemaAdapter = sql.DefaultMySQLSchema{}
			}
			table := "watermill_" + cfg.ForwarderTopic
			d.DropAtCleanup(t, db, table)
			ob, err := outbox.New(cfg)
			require.NoError(t, err)
			if d.Dialect == sqltest.Postgres { // the pgx path too: a pool, as a service has
				require.NoError(t, ob.InitializeSchema(ctx, sql.BeginnerFromPgx(pgPool(t))))
			}
			require.NoError(t, ob.InitializeSchema(ctx, beginner))
			require.NoError(t, ob.InitializeSchema(ctx, beginner), "a second run changes nothing")

			store, _ := d.Store(t, db)
			ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
			require.NoError(t, err)
			var id string
			_, err = ib.Process(ctx, "billing", "order-1", func(ctx context.Context) error {
				if id, err = outbox.MessageIDFromContext(ctx, "CashbackCredited"); err != nil {
					return err
				}
				return ob.Publish(ctx, "cashback", message.NewMessage(id, []byte(`{"cents":190}`)))
			})
			require.NoError(t, err)
			var rows int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+d.Quote(table)).Scan(&rows))
			require.Equal(t, 1, rows, "the committed handler's row")
			require.Equal(t, outbox.MessageID("billing", "order-1", "CashbackCredited"), id)
		})
	}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		ob, err := outbox.New(outbox.Config{})
		require.NoError(t, err)
		err = ob.InitializeSchema(ctx, nil)
		require.ErrorContains(t, err, "BeginnerFromPgx")
		// A table the server refuses to create: the error names the topic, on one line.
		ob, err = outbox.New(outbox.Config{ForwarderTopic: "x", SchemaAdapter: sql.DefaultPostgreSQLSchema{
			GenerateMessagesTableName: func(string) string { return `"no_such_schema"."outbox"` },
		}})
		require.NoError(t, err)
		err = ob.InitializeSchema(ctx, sql.BeginnerFromPgx(pgPool(t)))
		require.ErrorContains(t, err, `outbox: creating the outbox table of topic "x"`)
		require.NotContains(t, err.Error(), "\n")
	})
}
