package sqlitestore

import (
	"strconv"
	"strings"
)

// DefaultBusyTimeout is the busy_timeout, in milliseconds, that DSN sets:
// how long a transaction waits for another writer's lock before SQLITE_BUSY
// (inbox.ErrContended). Choose a longer one, in a DSN of your own, if handlers hold the
// lock longer.
const DefaultBusyTimeout = 5000

// DSN returns a data source name for modernc.org/sqlite (driver name "sqlite") that
// opens the database file at path, created if missing, with the settings the store
// wants: busy_timeout (DefaultBusyTimeout), so that a write waits for the writer before
// it; journal_mode WAL, so that readers and the writer do not block each other (the
// file's setting, kept; WAL needs every process on one host, never a network file
// system); and _txlock=immediate, so that every transaction of the handle takes the
// write lock at BEGIN rather than failing with SQLITE_BUSY at its first write after a
// read. Extend it with more &_pragma=name(value) parameters as you need.
//
//	db, err := sql.Open("sqlite", sqlitestore.DSN("app.db")) // import _ "modernc.org/sqlite"
//
// For github.com/mattn/go-sqlite3 (driver name "sqlite3") write
// "file:app.db?_busy_timeout=5000&_journal_mode=WAL&_txlock=immediate".
func DSN(path string) string {
	return "file:" + escapePath(path) + "?_pragma=busy_timeout(" + strconv.Itoa(DefaultBusyTimeout) + ")&_pragma=journal_mode(WAL)&_txlock=immediate"
}

// escapePath escapes what a file: URI would otherwise read as its query, fragment or
// an escape.
func escapePath(path string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
}
