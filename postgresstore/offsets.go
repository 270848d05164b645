package postgresstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// Offset mode on the PostgreSQL stores: one UPDATE per partition moves its row past the
// span, when the row is there and the whole span is past it, which is the steady state.
// A row another transaction holds is waited for, and at READ COMMITTED its new version
// judged again. Otherwise (a partition seen for the first time, a redelivery, a record
// refused) an upsert does it: it inserts a missing row, or changes nothing and still
// locks the row ("all rows will be locked when the ON CONFLICT DO UPDATE action is
// taken", PostgreSQL's INSERT documentation), and a read in the same round trip reports
// what the row holds. The UPDATE comes first because it is the cheaper: an upsert on an
// existing row also writes a lock of the row to the WAL (pgbench, one worker: the
// handler's UPDATE with the offsets' UPDATE ran at 1.2-1.6 times the rate with the
// upsert, about that of the handler alone).

var (
	_ contract.OffsetStore = (*Store)(nil)
	_ contract.OffsetStore = (*SQLStore)(nil)
)

// postgresOffsetQueries are the statements of offset mode on <table>_offsets.
type postgresOffsetQueries struct {
	table                                                  string // quoted, with its schema
	update, claim, state, setOutput, list, listAll, verify string
	del, insert                                            string
}

func newPostgresOffsetQueries(schema, table string) postgresOffsetQueries {
	o := pgName(schema, table+"_offsets")
	where := ` WHERE consumer = $1 AND topic = $2 AND partition = $3`
	cols := `consumer, topic, partition, next_offset, leader_epoch, max_timestamp, topic_id, updated_at`
	return postgresOffsetQueries{
		table: o,
		// The same arguments as claim: it moves an existing row only.
		update: `UPDATE ` + o + ` AS o SET next_offset = $5::bigint + 1, leader_epoch = $7, max_timestamp = GREATEST(o.max_timestamp, $8::bigint),
				topic_id = COALESCE($9::bytea, o.topic_id), output = NULL, updated_at = now()
			WHERE o.consumer = $1 AND o.topic = $2 AND o.partition = $3 AND o.next_offset <= $4
				AND ($6::integer < 0 OR o.leader_epoch < 0 OR o.leader_epoch <= $6) AND ($9::bytea IS NULL OR o.topic_id IS NULL OR o.topic_id = $9)`,
		// $4 first offset, $5 last, $6 first epoch, $7 last epoch, $8 latest record time
		// (Unix ms), $9 topic ID: the row moves to last+1 only if the whole span is past it.
		claim: `INSERT INTO ` + o + ` AS o (consumer, topic, partition, next_offset, leader_epoch, max_timestamp, topic_id)
			VALUES ($1, $2, $3, $5::bigint + 1, $7, $8, $9)
			ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, leader_epoch = EXCLUDED.leader_epoch,
				max_timestamp = GREATEST(o.max_timestamp, EXCLUDED.max_timestamp), topic_id = COALESCE(EXCLUDED.topic_id, o.topic_id),
				output = NULL, updated_at = now()
			WHERE o.next_offset <= $4 AND ($6::integer < 0 OR o.leader_epoch < 0 OR o.leader_epoch <= $6)
				AND ($9::bytea IS NULL OR o.topic_id IS NULL OR o.topic_id = $9)
			RETURNING 1`,
		state:     `SELECT next_offset, leader_epoch, max_timestamp, topic_id, output FROM ` + o + where,
		setOutput: `UPDATE ` + o + ` SET output = $4` + where,
		list:      `SELECT ` + cols + ` FROM ` + o + ` WHERE consumer = $1 ORDER BY consumer, topic, partition`,
		listAll:   `SELECT ` + cols + ` FROM ` + o + ` ORDER BY consumer, topic, partition`,
		verify:    `SELECT count(*) FROM (SELECT ` + cols + `, output FROM ` + o + ` LIMIT 0) o`,
		del:       `DELETE FROM ` + o + where,
		insert:    `INSERT INTO ` + o + ` (consumer, topic, partition, next_offset) VALUES ($1, $2, $3, $4)`,
	}
}

// claimArgs are the claim statement's arguments for span.
func claimArgs(consumer string, s contract.OffsetSpan) []any {
	return []any{consumer, s.Topic, s.Partition, s.First, s.Last, s.FirstEpoch, s.LastEpoch, s.MaxTimestamp, s.TopicID}
}

// wrapOffsets names what failed and says how to create a missing offsets table.
func wrapOffsets(doing, table string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703") {
		return fmt.Errorf("inbox: %s: %w: table %s is missing or outdated: run migration 000003, schema/postgres.sql, `inbox schema postgres` or CreateSchema: %w",
			doing, contract.ErrNoTable, table, err)
	}
	return wrapPostgres(doing, table, "CreateSchema", err)
}

// ClaimOffsets implements OffsetStore.
func (s *Store) ClaimOffsets(ctx context.Context, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	if err := ctx.Err(); err != nil { // pgx would close the connection: see Claim
		return contract.OffsetClaim{}, s.wrap("beginning the transaction", err)
	}
	if s.folded != nil {
		return s.folded.claimOffsets(ctx, consumer, spans)
	}
	tx, err := s.db.BeginTx(ctx, s.cfg.TxOptions)
	if err != nil {
		return contract.OffsetClaim{}, s.wrap("beginning the transaction", err)
	}
	claim, err := s.claimOffsets(ctx, tx, consumer, spans, false)
	if err != nil {
		return contract.OffsetClaim{}, contract.Join(err, rollbackPgx(ctx, tx))
	}
	return claim, nil
}

// ClaimOffsetsIn implements OffsetStore; tx must be a pgx.Tx.
func (s *Store) ClaimOffsetsIn(ctx context.Context, tx any, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	pgxTx, ok := tx.(pgx.Tx)
	if !ok {
		return contract.OffsetClaim{}, fmt.Errorf("inbox: the transaction in the context is a %T; PostgresStore joins only a pgx.Tx", tx)
	}
	return s.claimOffsets(ctx, pgxTx, consumer, spans, true)
}

// claimOffsets sends every span's UPDATE in one round trip (with the lock timeout
// around them), then, for the spans that did not move, their upserts and their rows'
// state in a second one.
func (s *Store) claimOffsets(ctx context.Context, tx pgx.Tx, consumer string, spans []contract.OffsetSpan, joined bool) (contract.OffsetClaim, error) {
	claim := contract.OffsetClaim{Partitions: make([]contract.PartitionState, len(spans))}
	rest := make([]int, 0, len(spans))
	for round, query := range []string{s.offsetSQL.update, s.offsetSQL.claim} {
		batch := &pgx.Batch{}
		if round == 0 && s.sql.searchPath != "" && !joined { // as in claim: the handler's statements find the schema's tables
			batch.Queue(s.sql.searchPath)
		}
		if s.cfg.LockTimeout > 0 {
			batch.Queue(s.sql.lockSet, fmt.Sprintf("%dms", lockTimeoutMillis(s.cfg.LockTimeout)))
		}
		for i, span := range spans {
			st := &claim.Partitions[i]
			if round == 1 && st.Moved {
				continue
			}
			batch.Queue(query, claimArgs(consumer, span)...).Exec(func(tag pgconn.CommandTag) error {
				st.Moved = tag.RowsAffected() == 1
				return nil
			})
			if round == 1 { // after the upsert: what the row holds, if it did not move
				batch.Queue(s.offsetSQL.state, consumer, span.Topic, span.Partition).QueryRow(func(row pgx.Row) error {
					return row.Scan(&st.Next, &st.LeaderEpoch, &st.MaxTimestamp, &st.TopicID, &st.Output)
				})
			}
		}
		if s.cfg.LockTimeout > 0 {
			batch.Queue(s.sql.lockReset)
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return contract.OffsetClaim{}, wrapOffsets("moving the offsets", s.offsetSQL.table, err)
		}
		rest = rest[:0]
		for i := range spans {
			if !claim.Partitions[i].Moved {
				rest = append(rest, i)
			}
		}
		if len(rest) == 0 {
			break
		}
	}
	for i := range claim.Partitions {
		if claim.Partitions[i].Moved {
			claim.Partitions[i] = contract.PartitionState{Moved: true}
		}
	}
	last := spans[len(spans)-1]
	claim.Tx = &pgxOffsetTx{pgxInboxTx: &pgxInboxTx{tx: tx, store: s, joined: joined}, consumer: consumer, last: last}
	return claim, nil
}

// pgxOffsetTx is the transaction of an offsets claim: its commit stores the output with
// the last span's partition.
type pgxOffsetTx struct {
	*pgxInboxTx
	consumer string
	last     contract.OffsetSpan
}

func (t *pgxOffsetTx) Commit(ctx context.Context, output []byte) error {
	if output != nil {
		_, err := t.tx.Exec(ctx, t.store.offsetSQL.setOutput, t.consumer, t.last.Topic, t.last.Partition, output)
		if err != nil {
			err = t.ended("storing the produced messages", err)
			if !t.joined {
				err = contract.Join(err, t.Rollback(ctx))
			}
			return err
		}
	}
	return t.pgxInboxTx.Commit(ctx, nil)
}

// Offsets implements OffsetStore.
func (s *Store) Offsets(ctx context.Context, consumer string) ([]contract.PartitionOffset, error) {
	query, args := s.offsetSQL.listAll, []any(nil)
	if consumer != "" {
		query, args = s.offsetSQL.list, []any{consumer}
	}
	rows, err := s.db.Query(ctx, query, args...)
	if err != nil {
		return nil, wrapOffsets("reading the offsets", s.offsetSQL.table, err)
	}
	offsets, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (contract.PartitionOffset, error) {
		return scanPartitionOffset(row.Scan)
	})
	if err != nil {
		return nil, wrapOffsets("reading the offsets", s.offsetSQL.table, err)
	}
	return offsets, nil
}

// scanPartitionOffset scans a row of the list statements.
func scanPartitionOffset(scan func(dest ...any) error) (contract.PartitionOffset, error) {
	var o contract.PartitionOffset
	var ms int64
	err := scan(&o.Consumer, &o.Topic, &o.Partition, &o.Next, &o.LeaderEpoch, &ms, &o.TopicID, &o.UpdatedAt)
	if ms >= 0 {
		o.MaxTimestamp = time.UnixMilli(ms).UTC()
	}
	return o, err
}

// SetOffset implements OffsetStore.
func (s *Store) SetOffset(ctx context.Context, consumer, topic string, partition int32, next int64) (bool, error) {
	var found bool
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, s.offsetSQL.del, consumer, topic, partition)
		if err != nil {
			return err
		}
		found = tag.RowsAffected() > 0
		if next >= 0 {
			_, err = tx.Exec(ctx, s.offsetSQL.insert, consumer, topic, partition, next)
		}
		return err
	})
	if err != nil {
		return false, wrapOffsets("setting the offset", s.offsetSQL.table, err)
	}
	return found, nil
}

// VerifyOffsets implements OffsetStore.
func (s *Store) VerifyOffsets(ctx context.Context) error {
	var n int
	if err := s.db.QueryRow(ctx, s.offsetSQL.verify).Scan(&n); err != nil {
		return wrapOffsets("checking the offsets table", s.offsetSQL.table, err)
	}
	return nil
}

// ClaimOffsets implements OffsetStore.
func (s *SQLStore) ClaimOffsets(ctx context.Context, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	var claim contract.OffsetClaim
	_, err := sqlstore.ClaimInNewTx(ctx, s.db, s.cfg.Isolation, s.wrap, contract.Record{}, nil, func(tx *sql.Tx) (contract.Claim, error) {
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
func (s *SQLStore) ClaimOffsetsIn(ctx context.Context, tx any, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	sqlTx, err := sqlstore.JoinedTx(tx, "SQLPostgresStore")
	if err != nil {
		return contract.OffsetClaim{}, err
	}
	return s.claimOffsets(ctx, sqlTx, consumer, spans, true)
}

// claimOffsets is PostgresStore.claimOffsets on database/sql: the statements one by
// one.
func (s *SQLStore) claimOffsets(ctx context.Context, tx *sql.Tx, consumer string, spans []contract.OffsetSpan, joined bool) (contract.OffsetClaim, error) {
	claim := contract.OffsetClaim{Partitions: make([]contract.PartitionState, len(spans))}
	if s.sql.searchPath != "" && !joined {
		if _, err := tx.ExecContext(ctx, s.sql.searchPath); err != nil {
			return contract.OffsetClaim{}, s.wrap("setting the search_path", err)
		}
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := tx.ExecContext(ctx, s.sql.lockSet, fmt.Sprintf("%dms", lockTimeoutMillis(s.cfg.LockTimeout))); err != nil {
			return contract.OffsetClaim{}, s.wrap("setting the lock timeout", err)
		}
	}
	for i, span := range spans {
		st := &claim.Partitions[i]
		for _, query := range []string{s.offsetSQL.update, s.offsetSQL.claim} {
			res, err := tx.ExecContext(ctx, query, claimArgs(consumer, span)...)
			var n int64
			if err == nil {
				n, err = res.RowsAffected()
			}
			if err != nil {
				return contract.OffsetClaim{}, wrapOffsets("moving the offsets", s.offsetSQL.table, err)
			}
			if st.Moved = n == 1; st.Moved {
				break
			}
		}
		if !st.Moved {
			err := tx.QueryRowContext(ctx, s.offsetSQL.state, consumer, span.Topic, span.Partition).Scan(&st.Next, &st.LeaderEpoch, &st.MaxTimestamp, &st.TopicID, &st.Output)
			if err != nil {
				return contract.OffsetClaim{}, wrapOffsets("reading the stored offsets", s.offsetSQL.table, err)
			}
		}
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := tx.ExecContext(ctx, s.sql.lockReset); err != nil {
			return contract.OffsetClaim{}, s.wrap("resetting the lock timeout", err)
		}
	}
	last := spans[len(spans)-1]
	claim.Tx = &sqlstore.Tx{SQL: tx, Joined: joined, Wrap: s.wrap, SetOutput: func(ctx context.Context, tx *sql.Tx, output []byte) error {
		_, err := tx.ExecContext(ctx, s.offsetSQL.setOutput, consumer, last.Topic, last.Partition, output)
		return err
	}}
	return claim, nil
}

// Offsets implements OffsetStore.
func (s *SQLStore) Offsets(ctx context.Context, consumer string) ([]contract.PartitionOffset, error) {
	query, args := s.offsetSQL.listAll, []any(nil)
	if consumer != "" {
		query, args = s.offsetSQL.list, []any{consumer}
	}
	offsets, err := sqlOffsets(ctx, s.db, query, args...)
	if err != nil {
		return nil, wrapOffsets("reading the offsets", s.offsetSQL.table, err)
	}
	return offsets, nil
}

// sqlOffsets runs a list statement of the offsets table.
func sqlOffsets(ctx context.Context, db sqlstore.DB, query string, args ...any) ([]contract.PartitionOffset, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var offsets []contract.PartitionOffset
	for rows.Next() {
		o, err := scanPartitionOffset(rows.Scan)
		if err != nil {
			return nil, err
		}
		offsets = append(offsets, o)
	}
	return offsets, rows.Err()
}

// SetOffset implements OffsetStore.
func (s *SQLStore) SetOffset(ctx context.Context, consumer, topic string, partition int32, next int64) (bool, error) {
	found, err := setOffsetSQL(ctx, s.db, sql.LevelReadCommitted, s.offsetSQL.del, s.offsetSQL.insert, consumer, topic, partition, next)
	if err != nil {
		return false, wrapOffsets("setting the offset", s.offsetSQL.table, err)
	}
	return found, nil
}

// setOffsetSQL deletes a partition's row and, for a next offset that is not negative,
// inserts it again with that offset, in one transaction.
func setOffsetSQL(ctx context.Context, db sqlstore.DB, isolation sql.IsolationLevel, del, insert, consumer, topic string, partition int32, next int64) (bool, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: isolation})
	if err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, del, consumer, topic, partition)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err == nil && next >= 0 {
		_, err = tx.ExecContext(ctx, insert, consumer, topic, partition, next)
	}
	if err != nil {
		return false, contract.Join(err, sqlstore.Rollback(tx))
	}
	return n > 0, tx.Commit()
}

// VerifyOffsets implements OffsetStore.
func (s *SQLStore) VerifyOffsets(ctx context.Context) error {
	var n int
	if err := s.db.QueryRowContext(ctx, s.offsetSQL.verify).Scan(&n); err != nil {
		return wrapOffsets("checking the offsets table", s.offsetSQL.table, err)
	}
	return nil
}
