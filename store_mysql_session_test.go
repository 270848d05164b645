package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// TestMySQLStoreSkipsSetTransactionAtReadCommitted counts the round trips of a first
// delivery and of a duplicate through the claim (Config.RecentKeys off) over one
// connection whose session the DSN puts at READ COMMITTED, against one at the server's
// REPEATABLE READ: the store finds the session's level on its first claim and then
// begins without SET TRANSACTION, one round trip less for each (ADR 120). The
// transactions still run at READ COMMITTED: the handler reads its level.
func TestMySQLStoreSkipsSetTransactionAtReadCommitted(t *testing.T) {
	t.Parallel()
	servers := []struct{ name, dsn, variable string }{
		{"mariadb", mariaDBDSN(), "tx_isolation"},
		{"mysql", os.Getenv("INBOX_MYSQL_DSN"), "transaction_isolation"},
	}
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			t.Parallel()
			if server.dsn == "" {
				t.Skip("MySQL not tested: set INBOX_MYSQL_DSN")
			}
			// count returns the round trips of a first delivery and of its duplicate, and
			// the level the handler's transaction ran at.
			count := func(t *testing.T, params map[string]string) (first, dup int64, level string) {
				rt := &sqltest.RoundTrips{}
				dial := fmt.Sprintf("counted-%s-%d", server.name, len(params))
				mysql.RegisterDialContext(dial, func(ctx context.Context, addr string) (net.Conn, error) {
					return rt.Dial(ctx, "tcp", addr)
				})
				cfg, err := mysql.ParseDSN(withDSNParams(t, server.dsn, params))
				require.NoError(t, err)
				cfg.Net = dial
				db := openSQL(t, "mysql", cfg.FormatDSN(), server.name, "INBOX_MARIADB_DSN or INBOX_MYSQL_DSN")
				db.SetMaxOpenConns(1)
				store := newMySQLStore(t, db, inbox.MySQLConfig{})
				ledger := newSQLLedger(t, db, true)
				ib := newTestInbox(t, store, inbox.Config{RecentKeys: -1})
				ctx := context.Background()
				credit := func(key string) bool {
					dup, err := ib.Process(ctx, "billing", key, func(ctx context.Context) error {
						tx, _ := inbox.TxFromContext[*sql.Tx](ctx)
						if err := tx.QueryRowContext(ctx, "SELECT @@"+server.variable).Scan(&level); err != nil {
							return err
						}
						return ledger.credit(ctx, 1)
					})
					require.NoError(t, err)
					return dup
				}
				credit("warm-up") // the connection, the prepared statements, the level's question
				credit("warm-up")
				rt.N.Store(0)
				require.False(t, credit("counted"))
				first = rt.N.Swap(0)
				require.True(t, credit("counted"))
				return first, rt.N.Swap(0), level
			}
			first, dup, level := count(t, nil)
			require.Equal(t, "REPEATABLE-READ", level, "the server's default; this test needs it")
			rcFirst, rcDup, rcLevel := count(t, map[string]string{server.variable: "'READ-COMMITTED'"})
			t.Logf("%s: first delivery %d round trips, duplicate %d at REPEATABLE READ sessions; %d and %d at READ COMMITTED ones",
				server.name, first, dup, rcFirst, rcDup)
			require.Equal(t, "READ-COMMITTED", rcLevel)
			require.Equal(t, [2]int64{first - 1, dup - 1}, [2]int64{rcFirst, rcDup}, "no SET TRANSACTION when the session is at READ COMMITTED")
		})
	}
}
