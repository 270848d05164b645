package redisstore_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// breaker is a go-redis Dialer (Options.Dialer, ClusterOptions.Dialer) whose connections
// fail on demand the way a network does at the worst moment: the command reaches the
// server and runs, the breaker reads the server's whole reply, then closes the
// connection, so the client never reads any of it. go-redis sends the command again on
// a new connection (MaxRetries), as it does after a real fault, and the resend must get
// the first run's answer. A rule can also hold a reply back until the test lets it
// through, to stand for a slow network without measuring time.
type breaker struct {
	mu     sync.Mutex
	rules  []*breakRule
	broken atomic.Int32 // connections broken so far
	writes atomic.Int32 // batches of commands written, the connection handshakes left out
	down   atomic.Bool  // the server is unreachable: dials are refused, writes fail
}

// breakRule matches a batch of commands (one command, or a pipeline) as written.
type breakRule struct {
	match func(cmds [][]string) bool
	left  int           // batches still to break or hold
	hold  chan struct{} // nil: break; else the reply is held until it is closed
	held  chan struct{} // closed when a reply is being held
}

// breakNext breaks the connection after the server replied to the next n batches for
// which match is true. match gets each command's arguments as sent, the name lower-cased.
func (b *breaker) breakNext(n int, match func(cmds [][]string) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rules = append(b.rules, &breakRule{match: match, left: n})
}

// holdNext holds back the server's reply to the next batch for which match is true,
// until the returned release is called; held is closed once a reply is held.
func (b *breaker) holdNext(match func(cmds [][]string) bool) (held <-chan struct{}, release func()) {
	r := &breakRule{match: match, left: 1, hold: make(chan struct{}), held: make(chan struct{})}
	b.mu.Lock()
	b.rules = append(b.rules, r)
	b.mu.Unlock()
	var once sync.Once
	return r.held, func() { once.Do(func() { close(r.hold) }) }
}

// observeNext returns a channel closed once the server's replies to the next batch for
// which match is true have arrived (they then reach the client as usual).
func (b *breaker) observeNext(match func(cmds [][]string) bool) <-chan struct{} {
	seen, release := b.holdNext(match)
	release()
	return seen
}

// breakNth breaks the connection after the server replied to the nth batch written from
// now on (1 is the next), whatever it holds (or the first after it that ran: a script
// the server did not have is loaded and sent again).
func (b *breaker) breakNth(n int) {
	target := b.writes.Load() + int32(n)
	b.breakNext(1, func([][]string) bool { return b.writes.Load() >= target })
}

// take returns the rule that claims a batch, if any.
func (b *breaker) take(cmds [][]string) *breakRule {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.rules {
		if r.left > 0 && r.match(cmds) {
			r.left--
			return r
		}
	}
	return nil
}

func (b *breaker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if b.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &breakingConn{Conn: c, b: b}, nil
}

// breakerClient returns a client of the shared Redis whose connections b breaks, with
// go-redis's default retries (the resends under test).
func breakerClient(t testing.TB, b *breaker, opts *redis.Options) *redis.Client {
	t.Helper()
	sharedClient(t) // skips or fails when Redis is not there
	if opts == nil {
		opts = &redis.Options{}
	}
	opts.Addr, opts.Dialer = sharedAddr(), b.dial
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// breakingConn parses what the client writes into commands, and, when a rule claimed a
// batch, reads the server's replies itself at the client's next Read.
type breakingConn struct {
	net.Conn
	b       *breaker
	out     []byte     // written bytes not yet parsed into whole commands
	batch   [][]string // the commands written since the client last read
	reading bool
	rule    *breakRule    // claims the replies to batch
	replay  *bytes.Reader // replies a hold read, for the client's next reads
}

func (c *breakingConn) Write(p []byte) (int, error) {
	if c.b.down.Load() {
		_ = c.Conn.Close()
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	if c.reading {
		c.reading, c.batch = false, nil
	}
	c.out = append(c.out, p...)
	for {
		args, n := respCommand(c.out)
		if n < 0 {
			break
		}
		c.out = c.out[n:]
		c.batch = append(c.batch, args)
	}
	if len(c.out) == 0 && len(c.batch) > 0 && c.rule == nil && !handshake(c.batch) {
		c.b.writes.Add(1)
		c.rule = c.b.take(c.batch)
	}
	return c.Conn.Write(p)
}

// handshake reports a batch go-redis sends on a new connection (HELLO, CLIENT SETINFO).
func handshake(batch [][]string) bool {
	return batch[0][0] == "hello" || batch[0][0] == "client"
}

func (c *breakingConn) Read(p []byte) (int, error) {
	c.reading = true
	if c.replay != nil && c.replay.Len() > 0 {
		return c.replay.Read(p)
	}
	rule := c.rule
	if rule == nil {
		return c.Conn.Read(p)
	}
	c.rule = nil
	// Read every reply of the batch: the server has run all of it.
	var in []byte
	buf := make([]byte, 4096)
	noscript := false
	for replies, parsed := 0, 0; replies < len(c.batch); {
		n, err := c.Conn.Read(buf)
		if err != nil {
			return 0, err
		}
		in = append(in, buf[:n]...)
		for {
			m := respValue(in[parsed:])
			if m < 0 {
				break
			}
			noscript = noscript || bytes.HasPrefix(in[parsed:], []byte("-NOSCRIPT"))
			parsed, replies = parsed+m, replies+1
		}
	}
	if noscript { // a script the server did not have did not run: the rule waits for the resend
		c.b.mu.Lock()
		rule.left++
		c.b.mu.Unlock()
		c.replay = bytes.NewReader(in)
		return c.replay.Read(p)
	}
	if rule.hold != nil {
		close(rule.held)
		<-rule.hold
		c.replay = bytes.NewReader(in)
		return c.replay.Read(p)
	}
	_ = c.Conn.Close()
	c.b.broken.Add(1)
	return 0, io.EOF
}

// respCommand parses one command (an array of bulk strings) from the start of b: its
// arguments, the first lower-cased, and its length, or -1 when b holds only part of it.
func respCommand(b []byte) ([]string, int) {
	n := respValue(b)
	if n < 0 {
		return nil, -1
	}
	var args []string
	rest := b[bytes.Index(b, []byte("\r\n"))+2 : n]
	for len(rest) > 0 {
		m := respValue(rest)
		line := bytes.Index(rest, []byte("\r\n"))
		args = append(args, string(rest[line+2:m-2]))
		rest = rest[m:]
	}
	if len(args) > 0 {
		args[0] = strings.ToLower(args[0])
	}
	return args, n
}

// respValue returns the length of the RESP2 or RESP3 value at the start of b, or -1 when
// b holds only part of it.
func respValue(b []byte) int {
	end := bytes.Index(b, []byte("\r\n"))
	if end < 0 {
		return -1
	}
	n := end + 2
	size := func() int { l, _ := strconv.Atoi(string(b[1:end])); return l }
	switch b[0] {
	case '$', '!', '=': // bulk string, bulk error, verbatim string
		l := size()
		if l < 0 {
			return n
		}
		if len(b) < n+l+2 {
			return -1
		}
		return n + l + 2
	case '*', '~', '>', '%', '|': // array, set, push, map, attribute
		l := size()
		if b[0] == '%' || b[0] == '|' {
			l *= 2
		}
		if b[0] == '|' {
			l++ // the value the attribute describes
		}
		for range max(l, 0) {
			m := respValue(b[n:])
			if m < 0 {
				return -1
			}
			n += m
		}
		return n
	}
	return n // a one-line value
}

// named matches a batch holding a command named name.
func named(name string) func([][]string) bool {
	return func(cmds [][]string) bool {
		for _, c := range cmds {
			if c[0] == name {
				return true
			}
		}
		return false
	}
}

// naming matches a batch holding a command with an argument that starts with prefix.
func naming(prefix string) func([][]string) bool {
	return func(cmds [][]string) bool {
		for _, c := range cmds {
			for _, a := range c[1:] {
				if strings.HasPrefix(a, prefix) {
					return true
				}
			}
		}
		return false
	}
}
