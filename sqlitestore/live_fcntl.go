//go:build aix || darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd || solaris

package sqlitestore

import (
	"errors"
	"os"
	"syscall"
)

// POSIX advisory record locks (fcntl): held by the process, dropped by the kernel when
// it dies, and never in conflict with the same process's own locks.

func lockByte(f *os.File, at int64) error {
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: at, Len: 1}
	return syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
}

func unlockByte(f *os.File, at int64) error {
	lk := syscall.Flock_t{Type: syscall.F_UNLCK, Whence: 0, Start: at, Len: 1}
	return syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
}

// byteHeld reports whether another process holds a lock on the byte.
func byteHeld(f *os.File, at int64) (bool, error) {
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: at, Len: 1}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return false, err
	}
	return lk.Type != syscall.F_UNLCK, nil
}

// tryLockByte takes the byte's lock if no other process holds it, and reports whether
// it did.
func tryLockByte(f *os.File, at int64) (bool, error) {
	err := lockByte(f, at)
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
		return false, nil
	}
	return err == nil, err
}
