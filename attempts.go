package inbox

import (
	"crypto/rand"
	"encoding/hex"
)

// Attempts (Config.MaxAttempts, ADRs 5, 7 and 60). Each delivery's attempt is a row of
// <table>_attempts named by a random token, committed before the claim's transaction
// begins so that it survives a crash, and a session lock named by the same token (an
// advisory lock on PostgreSQL, GET_LOCK on MySQL), taken by the statement that inserts
// the row, so before anyone can see the row, and released only once the row is gone.
// A process that dies takes its sessions, and their locks, with it: a row whose lock is
// free is an attempt that crashed. Only the transaction holding the key counts, and it
// ends its own attempt, row and lock, before it lets the key go.

// newAttemptToken returns a random attempt token: 32 hex digits, a valid lock name on
// every engine (MySQL's are at most 64 characters).
func newAttemptToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
