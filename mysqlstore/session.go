package mysqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/go-sql-driver/mysql"
)

// What the store knows of the session's isolation level (MySQLStore.session).
const (
	sessionUnknown       int32 = iota // not asked yet, or the question failed on the way
	sessionReadCommitted              // READ COMMITTED: no SET TRANSACTION needed
	sessionOther                      // another level, or a server that would not say
)

// mysqlUnknownVariable is ER_UNKNOWN_SYSTEM_VARIABLE: MariaDB before 11.1 has no
// transaction_isolation, MySQL 8 no longer has tx_isolation.
const mysqlUnknownVariable = 1193

// beginIsolation is the level the store's transactions ask database/sql for. For READ
// COMMITTED (the default) database/sql and the driver send SET TRANSACTION ISOLATION
// LEVEL as a round trip of its own before every START TRANSACTION; when the session is
// at READ COMMITTED already (transaction_isolation, or tx_isolation on MariaDB, in the
// DSN or the server's configuration), the store asks for sql.LevelDefault instead: the
// same level, one round trip less. The store asks the server once, on its first claim,
// before that claim's transaction, on a connection of its pool, and takes the answer for
// every connection of the pool: they come from one DSN. See ADR 120.
func (s *Store) beginIsolation(ctx context.Context) sql.IsolationLevel {
	if s.cfg.Isolation == sql.LevelReadCommitted && s.session.Load() == sessionUnknown {
		s.askSessionIsolation(ctx)
	}
	return s.known(s.cfg.Isolation)
}

// known is level, or sql.LevelDefault when level is READ COMMITTED and the session is
// known to be at it already. It asks nothing.
func (s *Store) known(level sql.IsolationLevel) sql.IsolationLevel {
	if level == sql.LevelReadCommitted && s.session.Load() == sessionReadCommitted {
		return sql.LevelDefault
	}
	return level
}

// askSessionIsolation asks the server for the session's isolation level, through
// @@SESSION.transaction_isolation and, where the server does not know it (MariaDB
// before 11.1), @@SESSION.tx_isolation. An answer the server gives is kept; a failure
// on the way (a broken connection, a context that ended) leaves the question for the
// next claim.
func (s *Store) askSessionIsolation(ctx context.Context) {
	var level string
	err := s.db.QueryRowContext(ctx, "SELECT @@SESSION.transaction_isolation").Scan(&level)
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == mysqlUnknownVariable {
		err = s.db.QueryRowContext(ctx, "SELECT @@SESSION.tx_isolation").Scan(&level)
	}
	switch {
	case err == nil && level == "READ-COMMITTED":
		s.session.Store(sessionReadCommitted)
	case err == nil || errors.As(err, &myErr): // another level, or a server that will not say
		s.session.Store(sessionOther)
	}
}
