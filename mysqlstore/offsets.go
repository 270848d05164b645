package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// Offset mode on MySQL, MariaDB and TiDB: one INSERT ... ON DUPLICATE KEY UPDATE per
// partition, which locks the row whether it changes it or not. Its condition (the
// whole span past the stored offset, epochs and topic IDs agreeing) is decided once, on
// the row as it was, in LAST_INSERT_ID(expr) in the first assignment: the later
// assignments read it back with LAST_INSERT_ID() ("remembered as the next value to be
// returned by LAST_INSERT_ID()", MySQL's reference), since MySQL, unlike standard SQL,
// lets each assignment see the ones before it. The client gets the value in the OK
// packet (sql.Result.LastInsertId): 0 for a new row, 1 for a row moved forward, 2 for
// a row left as it was, which a locking read then reports. The values go into the text
// as numbers and hexadecimal literals: one round trip, no statement to prepare.
//
// TiDB does not give LAST_INSERT_ID() back within a statement: see moveOffsetsTiDB.
//
// Unlike PostgreSQL's, the claim does not try a plain UPDATE first: at REPEATABLE READ
// (MySQLConfig.SessionIsolation) an UPDATE that finds no row takes a gap lock, which
// makes the first record of another partition, inserted into that gap, wait for this
// transaction (the conformance case OffsetMiddlewareRefusesWhatWouldLoseMessages hung
// on it). An insert takes no gap lock.

var _ contract.OffsetStore = (*Store)(nil)

// LAST_INSERT_ID values of the claim statement.
const (
	mysqlOffsetInserted = 0
	mysqlOffsetMoved    = 1
)

func (s *Store) offsetsTable() string { return "`" + s.cfg.Table + "_offsets`" }

// offsetsSupported refuses offset mode on Vitess.
func (s *Store) offsetsSupported() error {
	if s.cfg.Engine == Vitess {
		return fmt.Errorf("inbox: %w: MySQLStore on MySQLVitess has no offset mode: use key mode", errors.ErrUnsupported)
	}
	return nil
}

// mysqlInt returns n as SQL text.
func mysqlInt[T int32 | int64](n T) string { return strconv.FormatInt(int64(n), 10) }

// claimOffsetSQL returns the claim statement of one span.
func (s *Store) claimOffsetSQL(consumer string, span contract.OffsetSpan) string {
	topicID := "NULL"
	if span.TopicID != nil {
		topicID = hexLiteral(span.TopicID)
	}
	fe := mysqlInt(span.FirstEpoch)
	moved := "IF(LAST_INSERT_ID() = 1, "
	return "INSERT INTO " + s.offsetsTable() + " (`consumer`, `topic`, `partition`, `next_offset`, `leader_epoch`, `max_timestamp`, `topic_id`, `updated_at`) VALUES (" +
		hexLiteral([]byte(consumer)) + ", " + hexLiteral([]byte(span.Topic)) + ", " + mysqlInt(span.Partition) + ", " + mysqlInt(span.Last+1) + ", " +
		mysqlInt(span.LastEpoch) + ", " + mysqlInt(span.MaxTimestamp) + ", " + topicID + ", UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE " +
		"`updated_at` = IF(LAST_INSERT_ID(IF(`next_offset` <= " + mysqlInt(span.First) +
		" AND (" + fe + " < 0 OR `leader_epoch` < 0 OR `leader_epoch` <= " + fe + ")" +
		" AND (" + topicID + " IS NULL OR `topic_id` IS NULL OR `topic_id` = " + topicID + "), 1, 2)) = 1, UTC_TIMESTAMP(6), `updated_at`), " +
		"`max_timestamp` = " + moved + "GREATEST(`max_timestamp`, " + mysqlInt(span.MaxTimestamp) + "), `max_timestamp`), " +
		"`topic_id` = " + moved + "COALESCE(" + topicID + ", `topic_id`), `topic_id`), " +
		"`output` = " + moved + "NULL, `output`), " +
		"`leader_epoch` = " + moved + mysqlInt(span.LastEpoch) + ", `leader_epoch`), " +
		"`next_offset` = " + moved + mysqlInt(span.Last+1) + ", `next_offset`)"
}

// whereOffset selects the row of one partition.
func whereOffset(consumer, topic string, partition int32) string {
	return " WHERE `consumer` = " + hexLiteral([]byte(consumer)) + " AND `topic` = " + hexLiteral([]byte(topic)) + " AND `partition` = " + mysqlInt(partition)
}

// ClaimOffsets implements OffsetStore.
func (s *Store) ClaimOffsets(ctx context.Context, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	if err := s.offsetsSupported(); err != nil {
		return contract.OffsetClaim{}, err
	}
	var claim contract.OffsetClaim
	_, err := sqlstore.ClaimInNewTx(ctx, s.db, s.beginIsolation(ctx), s.wrap, contract.Record{}, nil, func(tx *sql.Tx) (contract.Claim, error) {
		var err error
		claim, err = s.claimOffsets(ctx, tx, consumer, spans, false)
		if err != nil {
			return contract.Claim{}, err
		}
		return contract.Claim{Tx: claim.Tx.(*sqlstore.Tx)}, nil
	})
	if err != nil {
		return contract.OffsetClaim{}, err
	}
	return claim, nil
}

// ClaimOffsetsIn implements OffsetStore; tx must be a *sql.Tx.
func (s *Store) ClaimOffsetsIn(ctx context.Context, tx any, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	if err := s.offsetsSupported(); err != nil {
		return contract.OffsetClaim{}, err
	}
	sqlTx, err := sqlstore.JoinedTx(tx, "MySQLStore")
	if err != nil {
		return contract.OffsetClaim{}, err
	}
	return s.claimOffsets(ctx, sqlTx, consumer, spans, true)
}

func (s *Store) claimOffsets(ctx context.Context, tx *sql.Tx, consumer string, spans []contract.OffsetSpan, joined bool) (contract.OffsetClaim, error) {
	claim := contract.OffsetClaim{Partitions: make([]contract.PartitionState, len(spans))}
	err := s.withLockTimeout(ctx, tx, func(bound string) error {
		if s.cfg.Engine == TiDB {
			return s.moveOffsetsTiDB(ctx, tx, bound, consumer, spans, claim.Partitions)
		}
		for i, span := range spans {
			res, err := tx.ExecContext(ctx, bound+s.claimOffsetSQL(consumer, span))
			if err != nil {
				return s.wrapOffsets("moving the offsets", err)
			}
			id, err := res.LastInsertId()
			if err != nil {
				return s.wrapOffsets("moving the offsets", err)
			}
			claim.Partitions[i].Moved = id == mysqlOffsetInserted || id == mysqlOffsetMoved
		}
		return nil
	})
	if err != nil {
		return contract.OffsetClaim{}, err
	}
	lock := " FOR UPDATE" // the row is ours already: the locking read sees it as it is, at any isolation level
	for i, span := range spans {
		st := &claim.Partitions[i]
		if st.Moved {
			continue
		}
		err := tx.QueryRowContext(ctx, "SELECT `next_offset`, `leader_epoch`, `max_timestamp`, `topic_id`, `output` FROM "+s.offsetsTable()+
			whereOffset(consumer, span.Topic, span.Partition)+lock).Scan(&st.Next, &st.LeaderEpoch, &st.MaxTimestamp, &st.TopicID, &st.Output)
		if err != nil {
			return contract.OffsetClaim{}, s.wrapOffsets("reading the stored offsets", err)
		}
	}
	last := spans[len(spans)-1]
	claim.Tx = &sqlstore.Tx{SQL: tx, Joined: joined, Wrap: s.wrap, SetOutput: func(ctx context.Context, tx *sql.Tx, output []byte) error {
		_, err := tx.ExecContext(ctx, "UPDATE "+s.offsetsTable()+" SET `output` = ?"+whereOffset(consumer, last.Topic, last.Partition), output)
		if errors.Is(err, mysql.ErrPktTooLarge) {
			return fmt.Errorf("%w: %d bytes of produced messages exceed maxAllowedPacket of the DSN: raise it: %w", contract.ErrOutputTooLarge, len(output), err)
		}
		return err
	}}
	return claim, nil
}

// Offsets implements OffsetStore.
func (s *Store) Offsets(ctx context.Context, consumer string) ([]contract.PartitionOffset, error) {
	if err := s.offsetsSupported(); err != nil {
		return nil, err
	}
	query := "SELECT `consumer`, `topic`, `partition`, `next_offset`, `leader_epoch`, `max_timestamp`, `topic_id`, DATE_FORMAT(`updated_at`, '%Y-%m-%d %H:%i:%s.%f') FROM " + s.offsetsTable()
	if consumer != "" {
		query += " WHERE `consumer` = " + hexLiteral([]byte(consumer))
	}
	rows, err := s.db.QueryContext(ctx, query+" ORDER BY `consumer`, `topic`, `partition`")
	if err != nil {
		return nil, s.wrapOffsets("reading the offsets", err)
	}
	defer rows.Close()
	var offsets []contract.PartitionOffset
	for rows.Next() {
		var o contract.PartitionOffset
		var ms int64
		var updated string
		if err := rows.Scan(&o.Consumer, &o.Topic, &o.Partition, &o.Next, &o.LeaderEpoch, &ms, &o.TopicID, &updated); err != nil {
			return nil, s.wrapOffsets("reading the offsets", err)
		}
		if ms >= 0 {
			o.MaxTimestamp = time.UnixMilli(ms).UTC()
		}
		if o.UpdatedAt, err = time.Parse(mysqlTimeFormat, updated); err != nil {
			return nil, s.wrapOffsets("reading the offsets", err)
		}
		offsets = append(offsets, o)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapOffsets("reading the offsets", err)
	}
	return offsets, nil
}

// SetOffset implements OffsetStore.
func (s *Store) SetOffset(ctx context.Context, consumer, topic string, partition int32, next int64) (bool, error) {
	if err := s.offsetsSupported(); err != nil {
		return false, err
	}
	where := whereOffset(consumer, topic, partition)
	del := "DELETE FROM " + s.offsetsTable() + where
	insert := "INSERT INTO " + s.offsetsTable() + " (`consumer`, `topic`, `partition`, `next_offset`, `updated_at`) VALUES (" +
		hexLiteral([]byte(consumer)) + ", " + hexLiteral([]byte(topic)) + ", " + mysqlInt(partition) + ", " + mysqlInt(next) + ", UTC_TIMESTAMP(6))"
	var found bool
	err := s.inTx(ctx, s.db, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, del)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		found = n > 0
		if next >= 0 {
			_, err = tx.ExecContext(ctx, insert)
		}
		return err
	})
	if err != nil {
		return false, s.wrapOffsets("setting the offset", err)
	}
	return found, nil
}

// VerifyOffsets implements OffsetStore.
func (s *Store) VerifyOffsets(ctx context.Context) error {
	if err := s.offsetsSupported(); err != nil {
		return err
	}
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT `consumer`, `topic`, `partition`, `next_offset`, `leader_epoch`, `max_timestamp`, `topic_id`, `output`, `updated_at` FROM "+
		s.offsetsTable()+" LIMIT 0) o").Scan(&n)
	if err != nil {
		return s.wrapOffsets("checking the offsets table", err)
	}
	return nil
}

// wrapOffsets names what failed and says how to create a missing offsets table.
func (s *Store) wrapOffsets(doing string, err error) error {
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && (myErr.Number == mysqlNoSuchTable || myErr.Number == mysqlBadField) {
		return fmt.Errorf("inbox: %s: %w: table %q is missing or outdated: run migration 000003, schema/mysql.sql (schema/tidb.sql on TiDB), `inbox schema mysql` or CreateSchema: %w",
			doing, contract.ErrNoTable, s.cfg.Table+"_offsets", err)
	}
	return s.wrap(doing, err)
}

// moveOffsetsTiDB moves the offsets on TiDB, which does not give LAST_INSERT_ID() back
// within the statement that set it: an UPDATE moves a row that is there and wholly
// behind the span (TiDB takes no gap locks, so one that finds no row holds nothing up),
// and for the others a plain INSERT adds a missing row (moved), or fails with 1062,
// which TiDB undoes alone, for a row that is there; the locking read that follows
// locks it.
func (s *Store) moveOffsetsTiDB(ctx context.Context, tx *sql.Tx, bound, consumer string, spans []contract.OffsetSpan, states []contract.PartitionState) error {
	for i, span := range spans {
		topicID := "NULL"
		if span.TopicID != nil {
			topicID = hexLiteral(span.TopicID)
		}
		fe, next := mysqlInt(span.FirstEpoch), mysqlInt(span.Last+1)
		update := "UPDATE " + s.offsetsTable() + " SET `updated_at` = UTC_TIMESTAMP(6), `max_timestamp` = GREATEST(`max_timestamp`, " + mysqlInt(span.MaxTimestamp) + "), " +
			"`topic_id` = COALESCE(" + topicID + ", `topic_id`), `output` = NULL, `leader_epoch` = " + mysqlInt(span.LastEpoch) + ", `next_offset` = " + next +
			whereOffset(consumer, span.Topic, span.Partition) + " AND `next_offset` <= " + mysqlInt(span.First) +
			" AND (" + fe + " < 0 OR `leader_epoch` < 0 OR `leader_epoch` <= " + fe + ")" +
			" AND (" + topicID + " IS NULL OR `topic_id` IS NULL OR `topic_id` = " + topicID + ")"
		res, err := tx.ExecContext(ctx, bound+update)
		var n int64
		if err == nil {
			n, err = res.RowsAffected() // next_offset changes whenever it matches: whatever clientFoundRows
		}
		if err != nil {
			return s.wrapOffsets("moving the offsets", err)
		}
		if states[i].Moved = n == 1; n == 1 {
			continue
		}
		_, err = tx.ExecContext(ctx, bound+"INSERT INTO "+s.offsetsTable()+" (`consumer`, `topic`, `partition`, `next_offset`, `leader_epoch`, `max_timestamp`, `topic_id`, `updated_at`) VALUES ("+
			hexLiteral([]byte(consumer))+", "+hexLiteral([]byte(span.Topic))+", "+mysqlInt(span.Partition)+", "+next+", "+
			mysqlInt(span.LastEpoch)+", "+mysqlInt(span.MaxTimestamp)+", "+topicID+", UTC_TIMESTAMP(6))")
		var myErr *mysql.MySQLError
		switch {
		case err == nil:
			states[i].Moved = true
		case !errors.As(err, &myErr) || myErr.Number != mysqlDuplicateEntry:
			return s.wrapOffsets("moving the offsets", err)
		}
	}
	return nil
}
