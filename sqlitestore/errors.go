package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// SQLite result codes the store classifies (https://sqlite.org/rescode.html). The
// extended codes carry the primary code in their low byte.
const (
	codeError     = 1  // SQLITE_ERROR: generic, e.g. no such table or column
	codeBusy      = 5  // SQLITE_BUSY: another connection holds the lock
	codeLocked    = 6  // SQLITE_LOCKED: a conflict in this connection or its shared cache
	codeInterrupt = 9  // SQLITE_INTERRUPT: the driver interrupted a statement whose context ended
	codeReadOnly  = 8  // SQLITE_READONLY
	codeFull      = 13 // SQLITE_FULL
)

// resultCode returns the SQLite result code an error of a database/sql driver carries,
// extended when the driver has it, without importing the driver: modernc.org/sqlite's
// *Error has Code() int (extended codes on), github.com/ncruces/go-sqlite3's *Error has
// Code() and ExtendedCode(), github.com/mattn/go-sqlite3's Error has the fields Code and
// ExtendedCode. The error's text is never read.
func resultCode(err error) (int, bool) {
	for _, e := range errorTree(err) {
		if code, ok := codeOf(e); ok {
			return code, true
		}
	}
	return 0, false
}

// errorTree returns err and every error it wraps, depth first.
func errorTree(err error) []error {
	var all []error
	var walk func(error)
	walk = func(e error) {
		if e == nil || len(all) > 64 {
			return
		}
		all = append(all, e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				walk(inner)
			}
		}
	}
	walk(err)
	return all
}

// codeOf reads the result code of one error value, if it has one.
func codeOf(e error) (int, bool) {
	v := reflect.ValueOf(e)
	for _, name := range []string{"ExtendedCode", "Code"} {
		if m := v.MethodByName(name); m.IsValid() && m.Type().NumIn() == 0 && m.Type().NumOut() == 1 {
			if code, ok := integer(m.Call(nil)[0]); ok && code != 0 {
				return code, true
			}
		}
	}
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return 0, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return 0, false
	}
	for _, name := range []string{"ExtendedCode", "Code"} {
		if f := v.FieldByName(name); f.IsValid() {
			if code, ok := integer(f); ok && code != 0 {
				return code, true
			}
		}
	}
	return 0, false
}

// integer returns v as an int when it is of an integer kind.
func integer(v reflect.Value) (int, bool) {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(v.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int(v.Uint()), true
	}
	return 0, false
}

// primary returns the primary result code of err, 0 when it carries none.
func primary(err error) int {
	code, _ := resultCode(err)
	return code & 0xff
}

// wrap names what failed and classifies SQLite's result codes: a lock the database gave
// up waiting for is ErrContended (the message comes again).
func (s *Store) wrap(doing string, err error) error {
	switch primary(err) {
	case codeBusy, codeLocked:
		return fmt.Errorf("inbox: %s: %w: the database's write lock stayed with another transaction for longer than %s: %w",
			doing, contract.ErrContended, s.waitName(), err)
	case codeInterrupt:
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("inbox: %s: the statement was interrupted (its context ended): %w", doing, err)
		}
	case codeReadOnly:
		return fmt.Errorf("inbox: %s: the database is read-only to this process: open it read-write (check the file's and its directory's permissions; no mode=ro in the DSN): %w", doing, err)
	case codeFull:
		return fmt.Errorf("inbox: %s: the disk or the database is full: free space, or purge old keys (inbox purge): %w", doing, err)
	}
	return fmt.Errorf("inbox: %s: %w", doing, err)
}

// waitName says what bounds a wait for the write lock, for error messages.
func (s *Store) waitName() string {
	if s.cfg.LockTimeout > 0 {
		return fmt.Sprintf("Config.LockTimeout (%v)", s.cfg.LockTimeout)
	}
	if known := s.known.Load(); known != nil && known.bound > 0 {
		return fmt.Sprintf("the store's wait on a connection without busy_timeout (%v)", known.bound)
	}
	return "the connection's busy_timeout"
}
