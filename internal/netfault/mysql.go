package netfault

import (
	"encoding/binary"
	"errors"
)

// mysqlTracker follows the MySQL client/server protocol. Every packet carries a 3-byte
// length and a sequence number; a command is the client's packet with sequence 0, and
// the server's answer starts with its packet of sequence 1, sent once it has run the
// command (the protocol has one command in flight at a time). Statements are in
// COM_QUERY and COM_STMT_PREPARE; COM_STMT_EXECUTE runs a prepared one by the id the
// server gave in its answer to the prepare.
type mysqlTracker struct {
	cbuf, sbuf []byte
	stmts      map[uint32]string // prepared statements' text by id
	// waiting holds, per command still unanswered, the text of a statement being
	// prepared, or nil for another command.
	waiting []*string
	lastSeq int // the sequence number of the server's last packet, -1 before any
}

func newMySQLTracker() *mysqlTracker {
	return &mysqlTracker{stmts: map[uint32]string{}, lastSeq: -1}
}

// Commands the tracker tells apart.
const (
	comQuit            = 0x01
	comQuery           = 0x03
	comStmtPrepare     = 0x16
	comStmtExecute     = 0x17
	comStmtSendLong    = 0x18
	comStmtClose       = 0x19
	mysqlSSLRequestLen = 32
)

func (t *mysqlTracker) sent(p []byte) ([]command, error) {
	t.cbuf = append(t.cbuf, p...)
	var cmds []command
	for {
		seq, payload, ok := mysqlPacket(t.cbuf)
		if !ok {
			break
		}
		t.cbuf = t.cbuf[4+len(payload):]
		if seq != 0 || len(payload) == 0 {
			// The handshake response (its first packet is the SSL request, when short),
			// authentication data, or the rest of a long packet.
			if seq == 1 && len(payload) == mysqlSSLRequestLen && t.lastSeq == 0 {
				return cmds, errors.New("the client asked for TLS, which a test connection cannot follow: use tls=false")
			}
			continue
		}
		switch payload[0] {
		case comQuery:
			cmds = append(cmds, command{text: string(payload[1:]), exec: true, replies: 1})
			t.waiting = append(t.waiting, nil)
		case comStmtPrepare:
			text := string(payload[1:])
			cmds = append(cmds, command{replies: 1})
			t.waiting = append(t.waiting, &text)
		case comStmtExecute:
			var text string
			if len(payload) >= 5 {
				text = t.stmts[binary.LittleEndian.Uint32(payload[1:5])]
			}
			cmds = append(cmds, command{text: text, exec: true, replies: 1})
			t.waiting = append(t.waiting, nil)
		case comStmtClose:
			if len(payload) >= 5 {
				delete(t.stmts, binary.LittleEndian.Uint32(payload[1:5]))
			}
		case comStmtSendLong, comQuit: // unanswered
		default:
			cmds = append(cmds, command{replies: 1})
			t.waiting = append(t.waiting, nil)
		}
	}
	t.cbuf = compact(t.cbuf)
	return cmds, nil
}

func (t *mysqlTracker) received(p []byte) (int, error) {
	t.sbuf = append(t.sbuf, p...)
	replies := 0
	for {
		seq, payload, ok := mysqlPacket(t.sbuf)
		if !ok {
			break
		}
		t.sbuf = t.sbuf[4+len(payload):]
		// An answer starts with sequence 1; a long result set's numbers wrap from 255 to
		// 0 and 1 again, which is no new answer.
		if seq == 1 && t.lastSeq != 0 && len(t.waiting) > 0 {
			replies++
			text := t.waiting[0]
			t.waiting = t.waiting[1:]
			if text != nil && len(payload) >= 5 && payload[0] == 0x00 { // COM_STMT_PREPARE_OK
				t.stmts[binary.LittleEndian.Uint32(payload[1:5])] = *text
			}
		}
		t.lastSeq = int(seq)
	}
	t.sbuf = compact(t.sbuf)
	return replies, nil
}

// mysqlPacket returns the packet at the start of b, if b holds all of it.
func mysqlPacket(b []byte) (seq byte, payload []byte, ok bool) {
	if len(b) < 4 {
		return 0, nil, false
	}
	n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
	if len(b) < 4+n {
		return 0, nil, false
	}
	return b[3], b[4 : 4+n], true
}
