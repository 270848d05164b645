package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// Issue 19: TiDB without MySQLConfig.Engine got a raw "Error 1064 ... near
// UTC_TIMESTAMP(6)" from CreateSchema, and Vitess a store that sends SET TRANSACTION to
// vtgate and has no VSchema. The store tells them from the server's version, and
// CreateSchema and New fail naming the setting.
func TestMySQLEngineFromTheServer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		db     func(t testing.TB) *sql.DB
		engine inbox.MySQLEngine
	}{
		{"tidb", tidbDB, inbox.MySQLTiDB},
		{"vitess", vitessDB, inbox.MySQLVitess},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := c.db(t)
			table := tableName("inbox")
			store, err := inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table}) // Engine left out
			require.NoError(t, err)
			want := fmt.Sprintf("set MySQLConfig.Engine to inbox.%v", c.engine)
			err = store.CreateSchema(context.Background())
			require.ErrorContains(t, err, want)
			require.ErrorContains(t, err, "inbox: ")
			_, err = inbox.New(inbox.Config{Store: store, Consumer: "billing"})
			require.ErrorContains(t, err, want)

			// Told, the same server works.
			if c.engine == inbox.MySQLVitess {
				vschemaMu.Lock()
				defer vschemaMu.Unlock()
			}
			newMySQLStore(t, db, inbox.MySQLConfig{Table: table, Engine: c.engine})
		})
	}
	// MariaDB is InnoDB: nothing to refuse (newMySQLStore runs CreateSchema).
	newMySQLStore(t, mariaDB(t), inbox.MySQLConfig{})
}
