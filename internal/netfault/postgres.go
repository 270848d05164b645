package netfault

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// postgresTracker follows PostgreSQL's protocol 3. The client's statements are in simple
// queries ('Q') and in Parse messages ('P'), which name them; a Bind ('B') runs the
// statement it names. The server answers every simple query and every Sync ('S') with
// one ReadyForQuery ('Z') once it has run all before it, so counting both finds the
// reply of a batch.
type postgresTracker struct {
	cbuf, sbuf []byte
	started    bool              // the startup message went: typed messages follow
	answers    int               // one-byte answers the server owes (SSL and GSS requests)
	stmts      map[string]string // prepared statements' text by name ("" the unnamed one)
}

func newPostgresTracker() *postgresTracker {
	return &postgresTracker{stmts: map[string]string{}}
}

// Codes of the untyped messages a client may send before its startup message.
const (
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
	pgCancelRequest = 80877102
)

func (t *postgresTracker) sent(p []byte) ([]command, error) {
	begun := len(t.cbuf) // bytes of earlier writes not yet read: p begins there
	t.cbuf = append(t.cbuf, p...)
	read := 0 // bytes of t.cbuf read by the loop
	var cmds []command
	for {
		if !t.started { // untyped: int32 length (itself included), int32 code or version
			if len(t.cbuf) < 8 {
				break
			}
			n := int(binary.BigEndian.Uint32(t.cbuf))
			if n < 8 {
				return cmds, fmt.Errorf("client message of length %d before the startup message", n)
			}
			if len(t.cbuf) < n {
				break
			}
			switch binary.BigEndian.Uint32(t.cbuf[4:8]) {
			case pgSSLRequest, pgGSSENCRequest:
				t.answers++
			case pgCancelRequest: // on a connection of its own, unanswered
			default:
				t.started = true
				cmds = append(cmds, command{replies: 1}) // answered by the first ReadyForQuery
			}
			t.cbuf = t.cbuf[n:]
			read += n
			continue
		}
		typ, body, ok, err := pgMessage(t.cbuf)
		if err != nil || !ok {
			return cmds, err
		}
		switch typ {
		case 'Q':
			cmds = append(cmds, command{text: cString(body), exec: true, replies: 1, start: max(0, read-begun)})
		case 'P':
			name, rest := cutCString(body)
			t.stmts[name] = cString(rest)
		case 'B':
			_, rest := cutCString(body) // the portal
			stmt, _ := cutCString(rest)
			cmds = append(cmds, command{text: t.stmts[stmt], exec: true, start: max(0, read-begun)})
		case 'C':
			if len(body) > 0 && body[0] == 'S' {
				delete(t.stmts, cString(body[1:]))
			}
		case 'S', 'F':
			cmds = append(cmds, command{replies: 1})
		}
		t.cbuf = t.cbuf[5+len(body):]
		read += 5 + len(body)
	}
	t.cbuf = compact(t.cbuf)
	return cmds, nil
}

func (t *postgresTracker) received(p []byte) (int, error) {
	t.sbuf = append(t.sbuf, p...)
	replies := 0
	for {
		if t.answers > 0 {
			if len(t.sbuf) == 0 {
				break
			}
			if t.sbuf[0] != 'N' {
				return replies, errors.New("the server accepted TLS or GSS encryption, which a test connection cannot follow: use sslmode=disable")
			}
			t.answers--
			t.sbuf = t.sbuf[1:]
			continue
		}
		typ, body, ok, err := pgMessage(t.sbuf)
		if err != nil || !ok {
			return replies, err
		}
		if typ == 'Z' {
			replies++
		}
		t.sbuf = t.sbuf[5+len(body):]
	}
	t.sbuf = compact(t.sbuf)
	return replies, nil
}

// pgMessage returns the typed message at the start of b, if b holds all of it.
func pgMessage(b []byte) (typ byte, body []byte, ok bool, err error) {
	if len(b) < 5 {
		return 0, nil, false, nil
	}
	n := int(binary.BigEndian.Uint32(b[1:5]))
	if n < 4 {
		return 0, nil, false, fmt.Errorf("message %q of length %d", b[0], n)
	}
	if len(b) < 1+n {
		return 0, nil, false, nil
	}
	return b[0], b[5 : 1+n], true, nil
}

// cutCString returns the NUL-terminated string at the start of b and what follows it.
func cutCString(b []byte) (string, []byte) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i]), b[i+1:]
	}
	return string(b), nil
}

func cString(b []byte) string {
	s, _ := cutCString(b)
	return s
}

// compact returns b in an array of its own once the bytes before it are consumed, so
// that a long-lived connection does not keep every byte it ever carried.
func compact(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
