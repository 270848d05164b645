// Package netfault breaks the tests' database connections on purpose, at a chosen step.
//
// An Injector is a dialer: pgx's ConnConfig.DialFunc, go-sql-driver's Config.DialFunc
// (or mysql.RegisterDialContext), go-redis's Options.Dialer and ClusterOptions.Dialer
// (every node a Cluster client dials, at the addresses CLUSTER SLOTS gives, goes
// through it). Its connections follow the protocol they carry (PostgreSQL, MySQL or
// RESP), so that they know each command the client sends: its statement text, also for
// a statement prepared once and executed later by name or id, or a Redis command's
// arguments, and which of the server's replies answers it.
//
// One armed fault breaks one connection, the first of the injector's connections whose
// client sends a command the fault's Step matches:
//
//   - AfterReply lets the command reach the server, waits until the server's reply to it
//     (and to everything written with it) has arrived, so that the server has run it,
//     then breaks the connection: the client never reads the reply. It is the fault the
//     client cannot tell from one that stopped the command on its way, and the one a
//     driver that resends (go-redis does) turns into a second run.
//   - BeforeSend drops the write that carries the command and breaks the connection: the
//     server never sees it.
//   - BeforeNext sends the write up to the statement after the command, drops the rest
//     and breaks the connection: in a pipeline, the server runs the command and never
//     gets the next one (the stored output's UPDATE without its COMMIT).
//
// Either way the client's write succeeds, as a write into a socket does, and its next
// read fails with "connection reset by peer"; the server sees the connection end.
//
// It is a test helper: it trusts the protocols' framing, follows no TLS or compression,
// and reports what it could not follow through Err.
package netfault

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
)

// Protocol is the wire protocol an Injector's connections carry.
type Protocol int

const (
	// Postgres is PostgreSQL's frontend/backend protocol 3, without TLS.
	Postgres Protocol = iota + 1
	// MySQL is the MySQL and MariaDB client/server protocol, without TLS or compression.
	MySQL
	// RESP is Redis's protocol, RESP2 or RESP3, without TLS.
	RESP
)

// String returns the protocol's name.
func (p Protocol) String() string {
	switch p {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case RESP:
		return "resp"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// Mode is how an armed fault breaks the connection.
type Mode int

const (
	// AfterReply breaks the connection once the server has answered the command: it ran,
	// and the client never reads the answer.
	AfterReply Mode = iota
	// BeforeSend drops the write that carries the command and breaks the connection: the
	// command never reaches the server.
	BeforeSend
	// BeforeNext lets the struck command reach the server with what its write carries
	// up to the next statement, drops the rest of the write, and ends the connection
	// once the server has read what it got (it closes its side at the end of its input):
	// in a PostgreSQL pipeline (the stored output's UPDATE and the COMMIT in one batch)
	// the server runs the first and never gets the second. A write that carries no
	// statement after the struck one goes whole: the server runs it, and the client
	// never reads the reply.
	BeforeNext
)

// String returns the mode's name, as the fault axis's test names use it.
func (m Mode) String() string {
	switch m {
	case AfterReply:
		return "after-reply"
	case BeforeSend:
		return "before-send"
	case BeforeNext:
		return "before-next"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Match reports whether a command is the one a Step names. It gets the statement text
// of a SQL command that runs a statement (a simple query, or the execution of a
// prepared statement, whose text it was prepared with), or a Redis command's arguments
// joined by spaces ("set k v nx").
type Match func(command string) bool

// Contains matches a command that contains s.
func Contains(s string) Match { return func(c string) bool { return strings.Contains(c, s) } }

// Equal matches a command that is s, ignoring case and surrounding space ("commit").
func Equal(s string) Match {
	return func(c string) bool { return strings.EqualFold(strings.TrimSpace(c), s) }
}

// HasPrefix matches a command that starts with s.
func HasPrefix(s string) Match { return func(c string) bool { return strings.HasPrefix(c, s) } }

// HasSuffix matches a command that ends with s.
func HasSuffix(s string) Match { return func(c string) bool { return strings.HasSuffix(c, s) } }

// All matches a command that every m matches.
func All(ms ...Match) Match {
	return func(c string) bool {
		for _, m := range ms {
			if !m(c) {
				return false
			}
		}
		return true
	}
}

// Step names where a fault strikes: the first command Match matches, on any connection
// of the injector; with After, only on a connection that sent a command After matches
// since the fault was armed (the COMMIT of the transaction that claimed a key, not the
// COMMIT of another one).
type Step struct {
	Match Match
	After Match
}

// Injector dials connections that an armed fault can break. Its zero value is not
// usable: call New.
type Injector struct {
	proto  Protocol
	dialer net.Dialer

	mu    sync.Mutex
	armed *Fault
	err   error // the first thing a connection could not follow
}

// New returns an Injector for connections that carry p.
func New(p Protocol) *Injector { return &Injector{proto: p} }

// DialContext dials addr and returns a connection that armed faults can break. Its
// signature is net.Dialer's, which the drivers' dialer options take.
func (in *Injector) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := in.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return newConn(c, in), nil
}

// Arm arms a fault at step: the first command step matches, from now on, breaks its
// connection in mode. One fault at a time: arming while another is armed panics.
func (in *Injector) Arm(step Step, mode Mode) *Fault {
	if step.Match == nil {
		panic("netfault: Arm with a Step without Match")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.armed != nil {
		panic("netfault: Arm while another fault is armed: Disarm it first")
	}
	f := &Fault{step: step, mode: mode, primed: map[*conn]bool{}, fired: make(chan struct{})}
	in.armed = f
	return f
}

// Disarm disarms f if it has not struck yet, and reports whether it had not.
func (in *Injector) Disarm(f *Fault) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.armed != f {
		return false
	}
	in.armed = nil
	return true
}

// Err returns the first thing a connection could not follow (TLS, a frame it does not
// know), after which its commands can no longer be matched; nil if none.
func (in *Injector) Err() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.err
}

func (in *Injector) fail(err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.err == nil {
		in.err = fmt.Errorf("netfault (%v): %w", in.proto, err)
	}
}

// strike returns the armed fault if command, sent on c, is its step, and disarms it.
func (in *Injector) strike(c *conn, command string) *Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	f := in.armed
	if f == nil {
		return nil
	}
	if f.step.After != nil && !f.primed[c] {
		if f.step.After(command) {
			f.primed[c] = true
		}
		return nil
	}
	if !f.step.Match(command) {
		return nil
	}
	in.armed = nil
	f.command = command
	return f
}

// Fault is one armed fault.
type Fault struct {
	step   Step
	mode   Mode
	primed map[*conn]bool // connections that sent step.After; guarded by the Injector

	fired   chan struct{}
	command string // the command it struck; set before fired is closed
	err     error  // AfterReply: why the reply was not seen whole; set before fired is closed
}

// Mode returns how the fault breaks its connection.
func (f *Fault) Mode() Mode { return f.mode }

// Fired is closed once the fault broke its connection: for AfterReply, after the
// server's reply arrived (or the connection ended before it: see Err).
func (f *Fault) Fired() <-chan struct{} { return f.fired }

// HasFired reports whether the fault broke its connection.
func (f *Fault) HasFired() bool {
	select {
	case <-f.fired:
		return true
	default:
		return false
	}
}

// Command returns the command the fault struck, once it fired.
func (f *Fault) Command() string {
	<-f.fired
	return f.command
}

// Err returns, once the fault fired, nil when it broke the connection as its mode says,
// or, for AfterReply, why the server's reply did not arrive whole first (the connection
// ended, a deadline passed): then the command may or may not have run.
func (f *Fault) Err() error {
	<-f.fired
	return f.err
}

func (f *Fault) fire(err error) {
	f.err = err
	close(f.fired)
}
