package mysqlstore

import (
	"context"

	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// mysqlAttemptLockPrefix starts the GET_LOCK name of an attempt: the names are the
// server's, shared by every table and application.
const mysqlAttemptLockPrefix = "inbox."

// CheckAttempts implements attemptChecker.
func (s *Store) CheckAttempts(context.Context) error {
	a := mysqlAttempts{s}
	return sqlstore.CheckAttempts(s.db, a.CountInTx(), s.cfg.Isolation.String())
}
