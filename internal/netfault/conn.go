package netfault

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// tracker follows one connection's protocol in both directions.
type tracker interface {
	// sent reads what the client writes and returns the commands it completes.
	sent(p []byte) ([]command, error)
	// received reads what the server sends and returns how many replies it completes.
	received(p []byte) (int, error)
}

// command is one command the client sent.
type command struct {
	text string // the statement or the Redis arguments Match gets; "" when it runs none
	exec bool   // it runs a statement: a Step can match it
	// replies is how many replies the server owes for it: 1 at a synchronisation point
	// (a PostgreSQL Sync or simple query, a MySQL command, a Redis command), else 0.
	replies int
	// start is where the command's first message begins in the write that completed it
	// (PostgreSQL; 0 where the tracker does not say, or when it began in an earlier
	// write): BeforeNext cuts a write there.
	start int
}

// conn is a connection an armed fault can break.
type conn struct {
	net.Conn
	in *Injector

	mu      sync.Mutex
	tr      tracker // nil once the connection could not be followed
	owed    int     // replies owed for the commands sent so far
	got     int     // replies received so far
	fault   *Fault  // the AfterReply fault that struck this connection, waiting for its reply
	target  int     // the replies to wait for before breaking; -1 until the batch's Sync is written
	broken  bool
	brokeAt error // why the wait for the reply ended early, for the fault's Err
}

func newConn(c net.Conn, in *Injector) *conn {
	cn := &conn{Conn: c, in: in}
	switch in.proto {
	case Postgres:
		cn.tr = newPostgresTracker()
	case MySQL:
		cn.tr = newMySQLTracker()
	case RESP:
		cn.tr = &respTracker{}
	}
	return cn
}

// followSent passes what the client writes to the tracker, under c.mu; a frame it
// cannot follow stops it.
func (c *conn) followSent(p []byte) []command {
	if c.tr == nil {
		return nil
	}
	cmds, err := c.tr.sent(p)
	if err != nil {
		c.in.fail(err)
		c.tr = nil
	}
	return cmds
}

// followReceived passes what the server sends to the tracker, under c.mu.
func (c *conn) followReceived(p []byte) {
	if c.tr == nil {
		return
	}
	n, err := c.tr.received(p)
	c.got += n
	if err != nil {
		c.in.fail(err)
		c.tr = nil
	}
}

func (c *conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.broken {
		c.mu.Unlock()
		return 0, c.opError("write", syscall.EPIPE)
	}
	if c.fault != nil { // struck, waiting for the reply: the client writes on
		if c.target >= 0 { // past the batch the fault struck: it never gets there
			c.mu.Unlock()
			return len(p), nil
		}
		added := 0
		for _, cmd := range c.followSent(p) {
			added += cmd.replies
		}
		if c.owed += added; added > 0 {
			c.target = c.owed
		}
		c.mu.Unlock()
		return c.Conn.Write(p)
	}

	var f *Fault
	after := 0    // replies owed from the struck command to the end of the write
	cut := len(p) // BeforeNext: where the next statement after the struck one begins
	for _, cmd := range c.followSent(p) {
		c.owed += cmd.replies
		if f != nil {
			after += cmd.replies
			if cmd.exec && cmd.start > 0 && cut == len(p) {
				cut = cmd.start
			}
		} else if cmd.exec {
			if f = c.in.strike(c, cmd.text); f != nil {
				after = cmd.replies
			}
		}
	}
	if f == nil {
		c.mu.Unlock()
		return c.Conn.Write(p)
	}
	if f.mode == BeforeNext {
		c.broken = true
		c.mu.Unlock()
		_, _ = c.Conn.Write(p[:cut])
		drainUntilClosed(c.Conn)
		_ = c.Conn.Close()
		f.fire(nil)
		return len(p), nil // into the socket, as far as the client can tell
	}
	if f.mode == BeforeSend {
		c.broken = true
		c.mu.Unlock()
		_ = c.Conn.Close()
		f.fire(nil)
		return len(p), nil // into the socket, as far as the client can tell
	}
	c.fault, c.target = f, c.owed
	if after == 0 { // a PostgreSQL batch whose Sync comes in a later write
		c.target = -1
	}
	c.mu.Unlock()
	if _, err := c.Conn.Write(p); err != nil {
		c.mu.Lock()
		c.brokeAt = err
		c.breakLocked()
		c.mu.Unlock()
	}
	return len(p), nil
}

func (c *conn) Read(p []byte) (int, error) {
	for {
		c.mu.Lock()
		if c.broken {
			c.mu.Unlock()
			return 0, c.opError("read", syscall.ECONNRESET)
		}
		c.mu.Unlock()

		n, err := c.Conn.Read(p)

		c.mu.Lock()
		if c.broken { // a BeforeSend fault closed it under this read
			c.mu.Unlock()
			return 0, c.opError("read", syscall.ECONNRESET)
		}
		c.followReceived(p[:n])
		if c.fault == nil {
			c.mu.Unlock()
			return n, err
		}
		// A fault struck this connection: the client never sees what the server sends.
		switch {
		case c.target >= 0 && c.got >= c.target:
		case err != nil:
			c.brokeAt = err
		case c.tr == nil:
			c.brokeAt = c.in.Err()
		default:
			c.mu.Unlock()
			continue
		}
		c.breakLocked()
		c.mu.Unlock()
		return 0, c.opError("read", syscall.ECONNRESET)
	}
}

// breakLocked closes the connection and fires the fault that waited for its reply.
func (c *conn) breakLocked() {
	if c.broken {
		return
	}
	c.broken = true
	_ = c.Conn.Close()
	if f := c.fault; f != nil {
		c.fault = nil
		var err error
		if c.brokeAt != nil {
			err = &incompleteError{cause: c.brokeAt}
		}
		f.fire(err)
	}
}

func (c *conn) Close() error {
	c.mu.Lock()
	if c.fault != nil { // the client gave up before the reply came
		c.brokeAt = net.ErrClosed
		c.breakLocked()
	}
	broken := c.broken
	c.broken = true
	c.mu.Unlock()
	if broken {
		return nil
	}
	return c.Conn.Close()
}

func (c *conn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errno}
}

// incompleteError says why an AfterReply fault broke its connection before the reply
// was whole.
type incompleteError struct{ cause error }

func (e *incompleteError) Error() string {
	return "the connection ended before the server's reply arrived whole: " + e.cause.Error()
}

func (e *incompleteError) Unwrap() error { return e.cause }

// SetDeadline, SetReadDeadline and SetWriteDeadline do nothing on a connection a fault
// broke: the client's next read, not its deadline call, tells it the connection is gone.
func (c *conn) SetDeadline(t time.Time) error {
	return c.deadline(func() error { return c.Conn.SetDeadline(t) })
}

func (c *conn) SetReadDeadline(t time.Time) error {
	return c.deadline(func() error { return c.Conn.SetReadDeadline(t) })
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	return c.deadline(func() error { return c.Conn.SetWriteDeadline(t) })
}

func (c *conn) deadline(set func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken {
		return nil
	}
	return set()
}

// drainUntilClosed ends the writing side of nc and reads, discarding it, what the server
// still sends until it closes the connection (or 10 s pass): so the server has read and
// run everything that was written before it saw the end, and no reset (a close with
// unread data) overtakes it.
func drainUntilClosed(nc net.Conn) {
	hc, ok := nc.(interface{ CloseWrite() error })
	if !ok || hc.CloseWrite() != nil {
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := nc.Read(buf); err != nil {
			return
		}
	}
}
