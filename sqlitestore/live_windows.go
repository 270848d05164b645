//go:build windows

package sqlitestore

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// Windows byte-range locks (LockFileEx): held by the file handle, dropped when the
// process dies.

func overlapped(at int64) *windows.Overlapped {
	return &windows.Overlapped{Offset: uint32(at), OffsetHigh: uint32(at >> 32)}
}

func lockByte(f *os.File, at int64) error {
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, overlapped(at))
}

func unlockByte(f *os.File, at int64) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, overlapped(at))
}

// byteHeld tries the lock: taken at once, nobody held it (it is let go again).
func byteHeld(f *os.File, at int64) (bool, error) {
	err := lockByte(f, at)
	switch {
	case err == nil:
		return false, unlockByte(f, at)
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION), errors.Is(err, windows.ERROR_IO_PENDING):
		return true, nil
	}
	return false, err
}

// tryLockByte takes the byte's lock if no other process holds it, and reports whether
// it did.
func tryLockByte(f *os.File, at int64) (bool, error) {
	err := lockByte(f, at)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return false, nil
	}
	return err == nil, err
}
