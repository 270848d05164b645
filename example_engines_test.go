package inbox_test

import (
	"database/sql"
	"fmt"

	_ "github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox"
)

// On Vitess, the store begins its transactions at the session's level: an explicit
// Isolation would stay on vtgate's pooled connection, so it is refused. On TiDB, only
// the levels TiDB has are accepted.
func ExampleMySQLEngine() {
	// sql.Open does not connect: nothing here needs a server.
	vtgate, _ := sql.Open("mysql", "app@tcp(vtgate:3306)/orders?transaction_mode=%27SINGLE%27")
	_, err := inbox.NewMySQLStore(vtgate, inbox.MySQLConfig{Engine: inbox.MySQLVitess, Isolation: sql.LevelReadCommitted})
	fmt.Println(err != nil)
	_, err = inbox.NewMySQLStore(vtgate, inbox.MySQLConfig{Engine: inbox.MySQLVitess})
	fmt.Println(err)

	tidb, _ := sql.Open("mysql", "app@tcp(tidb:4000)/orders")
	_, err = inbox.NewMySQLStore(tidb, inbox.MySQLConfig{Engine: inbox.MySQLTiDB, Isolation: sql.LevelSerializable})
	fmt.Println(err)
	// Output:
	// true
	// <nil>
	// inbox: invalid store config: Isolation is Serializable and Engine is MySQLTiDB: TiDB has READ COMMITTED and REPEATABLE READ only
}
