package netfault

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// respTracker follows Redis's protocol: each command is an array of bulk strings (or an
// inline line), and the server answers each with one value, in order, besides RESP3
// push messages, which answer nothing.
type respTracker struct {
	cbuf, sbuf []byte
}

func (t *respTracker) sent(p []byte) ([]command, error) {
	t.cbuf = append(t.cbuf, p...)
	var cmds []command
	for len(t.cbuf) > 0 {
		args, n, err := respCommand(t.cbuf)
		if err != nil || n == 0 {
			t.cbuf = compact(t.cbuf)
			return cmds, err
		}
		t.cbuf = t.cbuf[n:]
		if len(args) > 0 {
			cmds = append(cmds, command{text: strings.Join(args, " "), exec: true, replies: 1})
		}
	}
	t.cbuf = nil
	return cmds, nil
}

func (t *respTracker) received(p []byte) (int, error) {
	t.sbuf = append(t.sbuf, p...)
	replies := 0
	for len(t.sbuf) > 0 {
		n, err := respValue(t.sbuf, 0, 0)
		if err != nil || n == 0 {
			t.sbuf = compact(t.sbuf)
			return replies, err
		}
		if t.sbuf[0] != '>' {
			replies++
		}
		t.sbuf = t.sbuf[n:]
	}
	t.sbuf = nil
	return replies, nil
}

// respCommand returns the arguments of the command at the start of b and its length,
// or a length of 0 when b does not hold all of it.
func respCommand(b []byte) ([]string, int, error) {
	if b[0] != '*' { // an inline command
		line, next, ok := respLine(b, 0)
		if !ok {
			return nil, 0, nil
		}
		return strings.Fields(string(line)), next, nil
	}
	line, next, ok := respLine(b, 1)
	if !ok {
		return nil, 0, nil
	}
	count, err := strconv.Atoi(string(line))
	if err != nil {
		return nil, 0, fmt.Errorf("command array of %q elements", line)
	}
	args := make([]string, 0, max(count, 0))
	for range count {
		if next >= len(b) {
			return nil, 0, nil
		}
		if b[next] != '$' {
			return nil, 0, fmt.Errorf("command argument of type %q", b[next])
		}
		line, after, ok := respLine(b, next+1)
		if !ok {
			return nil, 0, nil
		}
		size, err := strconv.Atoi(string(line))
		if err != nil || size < 0 {
			return nil, 0, fmt.Errorf("command argument of length %q", line)
		}
		if len(b) < after+size+2 {
			return nil, 0, nil
		}
		args = append(args, string(b[after:after+size]))
		next = after + size + 2
	}
	return args, next, nil
}

// respValue returns the end of the value that starts at b[i], or 0 when b does not
// hold all of it.
func respValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, nil
	}
	if depth > 64 {
		return 0, fmt.Errorf("values nested deeper than 64")
	}
	typ := b[i]
	line, next, ok := respLine(b, i+1)
	if !ok {
		return 0, nil
	}
	switch typ {
	case '+', '-', ':', ',', '#', '_', '(':
		return next, nil
	}
	n, err := strconv.Atoi(string(line))
	if err != nil {
		return 0, fmt.Errorf("reply of type %q with length %q", typ, line)
	}
	switch typ {
	case '$', '!', '=': // blob string, blob error, verbatim string
		if n < 0 {
			return next, nil
		}
		if len(b) < next+n+2 {
			return 0, nil
		}
		return next + n + 2, nil
	case '*', '~', '>', '%', '|': // array, set, push; map and attribute: pairs
		if typ == '%' || typ == '|' {
			n *= 2
		}
		for range n {
			if next, err = respValue(b, next, depth+1); next == 0 || err != nil {
				return 0, err
			}
		}
		if typ == '|' { // an attribute precedes the value it describes
			return respValue(b, next, depth+1)
		}
		return next, nil
	}
	return 0, fmt.Errorf("reply of type %q", typ)
}

// respLine returns the line that starts at b[i], without its CRLF, and where the next
// one starts.
func respLine(b []byte, i int) ([]byte, int, bool) {
	if i > len(b) {
		return nil, 0, false
	}
	end := bytes.Index(b[i:], []byte("\r\n"))
	if end < 0 {
		return nil, 0, false
	}
	return b[i : i+end], i + end + 2, true
}
