package sqlitestore

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Config configures a Store.
type Config struct {
	// Table is the inbox table; the store also uses <Table>_attempts. Create both with
	// schema/sqlite.sql, `inbox schema sqlite` or CreateSchema. Defaults to "inbox".
	Table string

	// LockTimeout bounds how long a claim (and any other write of the store) waits for
	// the database's write lock, which a concurrent duplicate's transaction, or any other
	// writer of the file, holds until it ends. The store sets it as the connection's
	// busy_timeout for the claim's first statement only (the value in force before is
	// restored at once, so the handler runs under the connection's own), and waits at
	// most as long for the other writers of this process. When it expires the claim
	// fails with inbox.ErrContended and the message comes again. Defaults to 0: wait as
	// long as the connection's busy_timeout allows, or, on a connection whose
	// busy_timeout is 0 (SQLite's default, under which a duplicate would fail at once
	// instead of waiting), DefaultBusyTimeout, set by the store as above.
	LockTimeout time.Duration
}

// withDefaults applies the defaults and checks the config.
func (c Config) withDefaults() (Config, error) {
	if c.Table == "" {
		c.Table = contract.DefaultTable
	}
	if _, err := Schema(c.Table); err != nil {
		return c, errors.New(strings.TrimPrefix(err.Error(), "inbox: "))
	}
	if c.LockTimeout < 0 {
		return c, fmt.Errorf("LockTimeout is %v: use 0 to wait as long as the connection's busy_timeout allows, or a positive duration", c.LockTimeout)
	}
	return c, nil
}
