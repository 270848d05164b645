package sqltest

import (
	"context"
	"net"
	"sync/atomic"
)

// RoundTrips counts the round trips of the database connections it dials: a run of
// writes followed by a read is one (a statement close that expects no answer and the
// next command share one). Give Dial to pgx (ConnConfig.DialFunc) or to
// go-sql-driver/mysql (mysql.RegisterDialContext), and read N.
type RoundTrips struct{ N atomic.Int64 }

// Dial dials addr and counts the connection's round trips.
func (rt *RoundTrips) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, rt: rt}, nil
}

type countingConn struct {
	net.Conn
	rt      *RoundTrips
	writing atomic.Bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	if !c.writing.Swap(true) {
		c.rt.N.Add(1)
	}
	return c.Conn.Write(p)
}

// Read ends a run of writes when the server's bytes arrive, not when the read starts:
// pgx's background reader can start a read before a write and return after it, and the
// next round trip's writes were then not counted.
func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.writing.Store(false)
	}
	return n, err
}
