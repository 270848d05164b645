package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// setOutput returns the func that stores the output with rec's key. An output the
// server's max_allowed_packet cannot carry is refused before it is sent (MariaDB closes
// the connection on such a packet), and one the driver refuses (maxAllowedPacket in
// the DSN) too: both as ErrOutputTooLarge.
func (s *Store) setOutput(rec contract.Record, joined bool) func(ctx context.Context, tx *sql.Tx, output []byte) error {
	return func(ctx context.Context, tx *sql.Tx, output []byte) error {
		server, err := s.serverInfo(ctx, tx)
		if err != nil {
			return fmt.Errorf("reading the server's max_allowed_packet: %w", err)
		}
		const overhead = 1 << 10 // the statement around the output, consumer and key
		if need := len(output) + len(rec.Consumer) + len(rec.Key) + overhead; need > server.maxPacket {
			return fmt.Errorf("%w: %d bytes of produced messages do not fit in the server's max_allowed_packet (%d bytes): raise it, or lower Config.MaxOutputBytes so that the inbox refuses such output first",
				contract.ErrOutputTooLarge, len(output), server.maxPacket)
		}
		if stmt := s.setOutputStmt.Load(); stmt != nil && !joined {
			_, err = tx.StmtContext(ctx, stmt).ExecContext(ctx, output, rec.Consumer, rec.Key)
		} else {
			_, err = tx.ExecContext(ctx, s.sql.setOutput, output, rec.Consumer, rec.Key)
		}
		if errors.Is(err, mysql.ErrPktTooLarge) {
			return fmt.Errorf("%w: %d bytes of produced messages exceed maxAllowedPacket of the DSN: raise it: %w", contract.ErrOutputTooLarge, len(output), err)
		}
		return err
	}
}
