package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Offset mode (inbox.OffsetStore, ADR 86) on <table>_offsets: one upsert per partition,
// the first statements of the claim's transaction (in this process's turn at the write
// lock, as a key's claim), moves the partition's row to the span's end when the whole
// span is past it (SQLite's ON CONFLICT … DO UPDATE … WHERE, 3.24+). The number of rows
// it changed says whether it moved: 1 for a row inserted or moved, 0 for a row left as
// it was, which a read then reports. SQLite locks the whole database for the writer,
// not a row: a concurrent claim of the same partition (a rebalance) waits for the
// transaction to end, then sees the offset it committed, as on the servers.

var _ contract.OffsetStore = (*Store)(nil)

// offsetsColumns are the columns of <table>_offsets the store reads and writes.
var offsetsColumns = []string{"consumer", "topic", "partition", "next_offset", "leader_epoch", "max_timestamp", "topic_id", "output", "updated_at"}

// offsetQueries are the statements of offset mode.
type offsetQueries struct {
	table                                  string // unquoted
	claim, state, setOutput, list, listAll string
	del, insert                            string
}

func newOffsetQueries(table string) offsetQueries {
	o := `"` + table + `_offsets"`
	where := ` WHERE "consumer" = ?1 AND "topic" = ?2 AND "partition" = ?3`
	cols := `"consumer", "topic", "partition", "next_offset", "leader_epoch", "max_timestamp", "topic_id", "updated_at"`
	return offsetQueries{
		table: table + "_offsets",
		// ?4 first offset, ?5 last, ?6 first epoch, ?7 last epoch, ?8 latest record time
		// (Unix ms), ?9 topic ID, ?10 now (µs): the row moves to last+1 only if the whole
		// span is past it. Unqualified columns in DO UPDATE are the row's as stored.
		claim: `INSERT INTO ` + o + ` (` + cols + `) VALUES (?1, ?2, ?3, ?5 + 1, ?7, ?8, ?9, ?10)
			ON CONFLICT ("consumer", "topic", "partition") DO UPDATE SET "next_offset" = excluded."next_offset", "leader_epoch" = excluded."leader_epoch",
				"max_timestamp" = max("max_timestamp", excluded."max_timestamp"), "topic_id" = coalesce(excluded."topic_id", "topic_id"),
				"output" = NULL, "updated_at" = excluded."updated_at"
			WHERE "next_offset" <= ?4 AND (?6 < 0 OR "leader_epoch" < 0 OR "leader_epoch" <= ?6)
				AND (?9 IS NULL OR "topic_id" IS NULL OR "topic_id" = ?9)`,
		state:     `SELECT "next_offset", "leader_epoch", "max_timestamp", "topic_id", "output" FROM ` + o + where,
		setOutput: `UPDATE ` + o + ` SET "output" = ?4` + where,
		list:      `SELECT ` + cols + ` FROM ` + o + ` WHERE "consumer" = ?1 ORDER BY "consumer", "topic", "partition"`,
		listAll:   `SELECT ` + cols + ` FROM ` + o + ` ORDER BY "consumer", "topic", "partition"`,
		del:       `DELETE FROM ` + o + where,
		insert:    `INSERT INTO ` + o + ` ("consumer", "topic", "partition", "next_offset", "updated_at") VALUES (?1, ?2, ?3, ?4, ?5)`,
	}
}

// ClaimOffsets implements inbox.OffsetStore: in this process's turn at the write lock,
// on a connection of the store's own, it begins the transaction and moves the offsets
// first. The transaction is returned open, moved or not.
func (s *Store) ClaimOffsets(ctx context.Context, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	l, err := s.enter(ctx, "moving the offsets")
	if err != nil {
		return contract.OffsetClaim{}, err
	}
	tx, err := l.begin(ctx)
	if err != nil {
		return contract.OffsetClaim{}, joinErrors(s.wrap("beginning the transaction", err), l.restore(ctx, l.conn), release(l))
	}
	claim, err := s.claimOffsets(ctx, &inboxTx{s: s, tx: tx, lease: l}, consumer, spans)
	if err != nil {
		return contract.OffsetClaim{}, joinErrors(err, rollback(tx), l.restore(ctx, l.conn), release(l))
	}
	return claim, nil
}

// ClaimOffsetsIn implements inbox.OffsetStore; tx must be a *sql.Tx on the same
// database file, as for ClaimIn.
func (s *Store) ClaimOffsetsIn(ctx context.Context, tx any, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	sqlTx, ok := tx.(*sql.Tx)
	if !ok {
		return contract.OffsetClaim{}, fmt.Errorf("inbox: the transaction in the context is a %T; sqlitestore joins only a *sql.Tx", tx)
	}
	if err := ctx.Err(); err != nil {
		return contract.OffsetClaim{}, fmt.Errorf("inbox: moving the offsets: %w", err)
	}
	return s.claimOffsets(ctx, &inboxTx{s: s, tx: sqlTx}, consumer, spans)
}

// claimOffsets runs each span's upsert under the wait for the write lock (see bounded),
// then reads the rows that did not move. t's Commit stores output with the last span's
// partition.
func (s *Store) claimOffsets(ctx context.Context, t *inboxTx, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	q := s.sql.offsets
	claim := contract.OffsetClaim{Partitions: make([]contract.PartitionState, len(spans))}
	err := s.bounded(ctx, t, func() error {
		at := now()
		for i, span := range spans {
			res, err := t.tx.ExecContext(ctx, q.claim, consumer, span.Topic, span.Partition, span.First, span.Last,
				span.FirstEpoch, span.LastEpoch, span.MaxTimestamp, blob(span.TopicID), at)
			var n int64
			if err == nil {
				n, err = res.RowsAffected()
			}
			if err != nil {
				return err
			}
			claim.Partitions[i].Moved = n == 1
		}
		return nil
	})
	if err != nil {
		return contract.OffsetClaim{}, s.wrapOffsets(t.tx, "moving the offsets", err)
	}
	for i, span := range spans {
		st := &claim.Partitions[i]
		if st.Moved {
			continue
		}
		err := t.tx.QueryRowContext(ctx, q.state, consumer, span.Topic, span.Partition).Scan(&st.Next, &st.LeaderEpoch, &st.MaxTimestamp, &st.TopicID, &st.Output)
		if err != nil {
			return contract.OffsetClaim{}, s.wrapOffsets(t.tx, "reading the stored offsets", err)
		}
	}
	if len(spans) > 0 {
		last := spans[len(spans)-1]
		t.setOutput = func(ctx context.Context, tx *sql.Tx, output []byte) error {
			_, err := tx.ExecContext(ctx, q.setOutput, consumer, last.Topic, last.Partition, output)
			return err
		}
	}
	claim.Tx = t
	return claim, nil
}

// Offsets implements inbox.OffsetStore.
func (s *Store) Offsets(ctx context.Context, consumer string) ([]contract.PartitionOffset, error) {
	query, args := s.sql.offsets.listAll, []any(nil)
	if consumer != "" {
		query, args = s.sql.offsets.list, []any{consumer}
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.wrapOffsets(s.db, "reading the offsets", err)
	}
	defer rows.Close()
	var offsets []contract.PartitionOffset
	for rows.Next() {
		var o contract.PartitionOffset
		var ms, updated int64
		if err := rows.Scan(&o.Consumer, &o.Topic, &o.Partition, &o.Next, &o.LeaderEpoch, &ms, &o.TopicID, &updated); err != nil {
			return nil, s.wrapOffsets(s.db, "reading the offsets", err)
		}
		if ms >= 0 {
			o.MaxTimestamp = time.UnixMilli(ms).UTC()
		}
		o.UpdatedAt = time.UnixMicro(updated).UTC()
		offsets = append(offsets, o)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapOffsets(s.db, "reading the offsets", err)
	}
	return offsets, nil
}

// SetOffset implements inbox.OffsetStore: the row is deleted and, for a next offset
// that is not negative, inserted again, in a write transaction of the store's own.
func (s *Store) SetOffset(ctx context.Context, consumer, topic string, partition int32, next int64) (bool, error) {
	q := s.sql.offsets
	var found bool
	err := s.write(ctx, "setting the offset", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q.del, consumer, topic, partition)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		found = n > 0
		if next >= 0 {
			_, err = tx.ExecContext(ctx, q.insert, consumer, topic, partition, next, now())
		}
		return err
	})
	if err != nil {
		return false, s.wrapOffsets(s.db, "setting the offset", err)
	}
	return found, nil
}

// VerifyOffsets implements inbox.OffsetStore: <table>_offsets must exist with the
// store's columns.
func (s *Store) VerifyOffsets(ctx context.Context) error {
	return s.verifyOffsets(ctx, s.db)
}

// verifyOffsets is VerifyOffsets through db.
func (s *Store) verifyOffsets(ctx context.Context, db queryer) error {
	have, err := s.columns(ctx, db, s.sql.offsets.table)
	if err != nil {
		return err
	}
	var missing []string
	for _, c := range offsetsColumns {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	switch {
	case len(have) == 0:
		return fmt.Errorf("inbox: checking the offsets table: %w: table %q does not exist: %s", contract.ErrNoTable, s.sql.offsets.table, createOffsets)
	case len(missing) > 0:
		return fmt.Errorf("inbox: checking the offsets table: %w: table %q lacks the columns %s: %s", contract.ErrNoTable, s.sql.offsets.table, strings.Join(missing, ", "), createOffsets)
	}
	return nil
}

// createOffsets says how to create the offsets table.
const createOffsets = "run migration 000002_offsets (migrations/sqlite), schema/sqlite.sql, `inbox schema sqlite` or (*sqlitestore.Store).CreateSchema"

// wrapOffsets is wrap, saying how to create the offsets table when SQLite reports it
// missing. SQLite gives a missing table or column the generic SQLITE_ERROR, so the
// table is checked, through db, when a statement of offset mode fails with that code.
func (s *Store) wrapOffsets(db queryer, doing string, err error) error {
	if primary(err) == codeError {
		if verr := s.verifyOffsets(context.Background(), db); verr != nil {
			return fmt.Errorf("inbox: %s: %w", doing, joinErrors(verr, err))
		}
	}
	return s.wrap(doing, err)
}
