//go:build !(aix || darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd || solaris || windows)

package sqlitestore

import "os"

// No advisory locks here: another process's attempts never look running, so a
// concurrent delivery in another process may be counted as a crash (docs/sqlite.md).

func lockByte(*os.File, int64) error            { return nil }
func unlockByte(*os.File, int64) error          { return nil }
func byteHeld(*os.File, int64) (bool, error)    { return false, nil }
func tryLockByte(*os.File, int64) (bool, error) { return true, nil }
