package mysqlstore

import "github.com/watermill-inbox/inbox/internal/sqlstore"

// SQLDB is what a database/sql store needs of a database. *sql.DB satisfies it, and so
// does *sql.Conn (which serves one message at a time). It is inbox.SQLDB.
type SQLDB = sqlstore.DB
