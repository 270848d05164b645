package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxKeyLen is the longest key stored as it is. A longer key, or one that is not valid
// UTF-8 or holds a NUL byte (which PostgreSQL text cannot store), is stored as
// "sha256:" and the hex SHA-256 of its bytes: deterministic, and still unique.
const MaxKeyLen = 255

// StorableKey returns key as the store keeps it: unchanged when it is short, valid UTF-8
// and free of NUL bytes; otherwise "sha256:" and its hex digest.
func StorableKey(key string) string {
	if len(key) <= MaxKeyLen && utf8.ValidString(key) && strings.IndexByte(key, 0) < 0 {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DefaultTable is the inbox table's default name. A store also uses the table
// <name>_attempts, for Config.MaxAttempts.
const DefaultTable = "inbox"

// DefaultMinRetention is the youngest purge cutoff inbox.Purge accepts unless forced, and
// the shortest a store that expires its keys by itself keeps them by default.
const DefaultMinRetention = 7 * 24 * time.Hour
