package postgresstore

import (
	"context"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Batches and offsets in one round trip on a pgx pool or connection, as the single
// claim (see foldedClaim): the BEGIN and the claim go in one simple-protocol query, the
// values quoted into it when that is provably safe. A folded claim cannot read rows
// back, so it takes the common case only, and lets an error say when it is not:
//
//   - a batch: a plain INSERT of every key, which fails with unique_violation when one
//     is there already; every key is new when it succeeds;
//   - offsets: each partition's UPDATE inside "SELECT 1 / count(*)", which fails with
//     division_by_zero when the partition did not move (a redelivery, or no row yet);
//     every record is new when it succeeds.
//
// On that error the transaction is rolled back and the claim runs again the
// parameterized way, on the same connection: a wasted round trip, only when there is
// a duplicate.

// pgDivisionByZero is PostgreSQL's division_by_zero: a folded offsets claim did not
// move a partition.
const pgDivisionByZero = "22012"

// claimBatch claims a batch, folded into the BEGIN when it can be.
func (f *foldedClaim) claimBatch(ctx context.Context, recs []contract.Record) (contract.BatchClaim, error) {
	conn, release, err := f.s.pin(ctx)
	if err != nil {
		return contract.BatchClaim{}, f.s.wrap("acquiring a connection", err)
	}
	if query, ok := f.beginInsertBatch(conn.PgConn(), recs); ok {
		opts := f.s.cfg.TxOptions
		opts.BeginQuery = query
		tx, err := conn.BeginTx(ctx, opts)
		if err == nil {
			claim := contract.BatchClaim{Duplicate: make([]bool, len(recs)), Fingerprint: make([][]byte, len(recs))}
			claim.Tx = &pgxInboxTx{tx: tx, store: f.s, release: release}
			return claim, nil
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgUniqueViolation || pgErr.TableName != f.s.cfg.Table ||
			(f.s.cfg.Schema != "" && pgErr.SchemaName != f.s.cfg.Schema) {
			return contract.BatchClaim{}, contract.Join(f.s.wrap("inserting the keys", err), f.endFolded(ctx, conn, release))
		}
		if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			release()
			return contract.BatchClaim{}, f.s.wrap("rolling back", err)
		}
	}
	tx, err := conn.BeginTx(ctx, f.s.cfg.TxOptions)
	if err != nil {
		release()
		return contract.BatchClaim{}, f.s.wrap("beginning the transaction", err)
	}
	claim, err := f.s.claimBatch(ctx, tx, recs, false)
	if err != nil || claim.Tx == nil {
		err = contract.Join(err, rollbackPgx(ctx, tx))
		release()
		claim.Tx = nil
		return claim, err
	}
	claim.Tx.(*pgxInboxTx).release = release
	return claim, nil
}

// endFolded ends a folded claim that failed, so that the connection goes back to the
// pool idle rather than destroyed (outside a transaction ROLLBACK only warns).
func (f *foldedClaim) endFolded(ctx context.Context, conn *pgx.Conn, release func()) error {
	defer release()
	if !conn.IsClosed() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return nil
}

// claimOffsets claims offsets, folded into the BEGIN when it can be.
func (f *foldedClaim) claimOffsets(ctx context.Context, consumer string, spans []contract.OffsetSpan) (contract.OffsetClaim, error) {
	conn, release, err := f.s.pin(ctx)
	if err != nil {
		return contract.OffsetClaim{}, f.s.wrap("acquiring a connection", err)
	}
	if query, ok := f.beginClaimOffsets(conn.PgConn(), consumer, spans); ok {
		opts := f.s.cfg.TxOptions
		opts.BeginQuery = query
		tx, err := conn.BeginTx(ctx, opts)
		if err == nil {
			claim := contract.OffsetClaim{Partitions: make([]contract.PartitionState, len(spans))}
			for i := range claim.Partitions {
				claim.Partitions[i].Moved = true
			}
			claim.Tx = &pgxOffsetTx{pgxInboxTx: &pgxInboxTx{tx: tx, store: f.s, release: release}, consumer: consumer, last: spans[len(spans)-1]}
			return claim, nil
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgDivisionByZero {
			return contract.OffsetClaim{}, contract.Join(wrapOffsets("moving the offsets", f.s.offsetSQL.table, err), f.endFolded(ctx, conn, release))
		}
		if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			release()
			return contract.OffsetClaim{}, f.s.wrap("rolling back", err)
		}
	}
	tx, err := conn.BeginTx(ctx, f.s.cfg.TxOptions)
	if err != nil {
		release()
		return contract.OffsetClaim{}, f.s.wrap("beginning the transaction", err)
	}
	claim, err := f.s.claimOffsets(ctx, tx, consumer, spans, false)
	if err != nil {
		err = contract.Join(err, rollbackPgx(ctx, tx))
		release()
		return contract.OffsetClaim{}, err
	}
	claim.Tx.(*pgxOffsetTx).release = release
	return claim, nil
}

// quotingSafe reports whether values can be quoted into SQL text on conn: see
// beginInsert.
func quotingSafe(conn *pgconn.PgConn, values ...string) bool {
	if conn.ParameterStatus("standard_conforming_strings") != "on" || conn.ParameterStatus("client_encoding") != "UTF8" {
		return false
	}
	for _, v := range values {
		if !literalSafe(v) {
			return false
		}
	}
	return true
}

// folded returns the BEGIN, the statements, and the lock timeout around them.
func (f *foldedClaim) folded(stmts ...string) string {
	var b strings.Builder
	b.WriteString(f.begin)
	if f.s.sql.searchPath != "" { // as in the folded claim of one key
		b.WriteString("; ")
		b.WriteString(f.s.sql.searchPath)
	}
	if f.s.cfg.LockTimeout > 0 {
		b.WriteString("; SELECT set_config('" + savedLockTimeout + "', current_setting('lock_timeout'), true); SET LOCAL lock_timeout = ")
		b.WriteString(strconv.FormatInt(lockTimeoutMillis(f.s.cfg.LockTimeout), 10))
	}
	for _, s := range stmts {
		b.WriteString("; ")
		b.WriteString(s)
	}
	if f.s.cfg.LockTimeout > 0 {
		b.WriteString("; " + restoreLockTimeout)
	}
	return b.String()
}

// beginInsertBatch returns the folded claim of a batch: a plain INSERT of its keys.
func (f *foldedClaim) beginInsertBatch(conn *pgconn.PgConn, recs []contract.Record) (string, bool) {
	values := []string{recs[0].Consumer}
	for _, r := range recs {
		values = append(values, r.Key)
	}
	if !quotingSafe(conn, values...) {
		return "", false
	}
	keys := make([]string, len(recs))
	fps := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(r.Key) + `"`
		fps[i] = "NULL"
		if r.Fingerprint != nil {
			fps[i] = `"` + hex.EncodeToString(r.Fingerprint) + `"`
		}
	}
	insert := "INSERT INTO " + f.table + " (consumer, key, fingerprint) SELECT " + quoteLiteral(recs[0].Consumer) +
		", k, decode(fp, 'hex') FROM unnest(" + quoteLiteral("{"+strings.Join(keys, ",")+"}") + "::text[], " +
		quoteLiteral("{"+strings.Join(fps, ",")+"}") + "::text[]) WITH ORDINALITY AS u(k, fp, o) ORDER BY o"
	return f.folded(insert), true
}

// beginClaimOffsets returns the folded claim of offsets: each partition's UPDATE, made
// to fail when it does not move the partition.
func (f *foldedClaim) beginClaimOffsets(conn *pgconn.PgConn, consumer string, spans []contract.OffsetSpan) (string, bool) {
	values := []string{consumer}
	for _, s := range spans {
		values = append(values, s.Topic)
	}
	if !quotingSafe(conn, values...) {
		return "", false
	}
	stmts := make([]string, len(spans))
	for i, s := range spans {
		// The statement names only what the span knows, so that it plans quickly: it is
		// planned again for every claim (the simple protocol prepares nothing).
		var set, where strings.Builder
		set.WriteString("next_offset = " + strconv.FormatInt(s.Last+1, 10) + ", leader_epoch = " + strconv.FormatInt(int64(s.LastEpoch), 10) +
			", output = NULL, updated_at = now()")
		where.WriteString("consumer = " + quoteLiteral(consumer) + " AND topic = " + quoteLiteral(s.Topic) +
			" AND partition = " + strconv.FormatInt(int64(s.Partition), 10) + " AND next_offset <= " + strconv.FormatInt(s.First, 10))
		if s.MaxTimestamp >= 0 {
			set.WriteString(", max_timestamp = GREATEST(max_timestamp, " + strconv.FormatInt(s.MaxTimestamp, 10) + ")")
		}
		if s.FirstEpoch >= 0 {
			where.WriteString(" AND (leader_epoch < 0 OR leader_epoch <= " + strconv.FormatInt(int64(s.FirstEpoch), 10) + ")")
		}
		if s.TopicID != nil {
			id := `'\x` + hex.EncodeToString(s.TopicID) + `'::bytea`
			set.WriteString(", topic_id = " + id)
			where.WriteString(" AND (topic_id IS NULL OR topic_id = " + id + ")")
		}
		stmts[i] = "WITH moved AS (UPDATE " + f.s.offsetSQL.table + " SET " + set.String() +
			" WHERE " + where.String() + " RETURNING 1) SELECT 1 / count(*) FROM moved"
	}
	return f.folded(stmts...), true
}
