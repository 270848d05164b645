package postgresstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// Batches on the PostgreSQL stores: every key in one statement,
//
//	INSERT INTO t (consumer, key, fingerprint)
//	SELECT $1, k, f FROM unnest($2::text[], $3::bytea[]) WITH ORDINALITY AS u(k, f, o) ORDER BY o
//	ON CONFLICT DO NOTHING RETURNING key
//
// with the keys sorted (the inbox sorts them), so that overlapping batches take their
// index entries in the same order and wait for each other instead of deadlocking. A
// key another transaction inserted waits for it, as the single claim does. Only when
// some keys come back as duplicates, a second statement reads what their first
// deliveries stored; at READ COMMITTED it takes a new snapshot, which sees the rows of
// the transactions the insert waited for.

var (
	_ contract.BatchStore = (*Store)(nil)
	_ contract.BatchStore = (*SQLStore)(nil)
)

// postgresBatchQueries are the batch statements on table.
type postgresBatchQueries struct{ insert, stored string }

func newPostgresBatchQueries(schema, table string) postgresBatchQueries {
	t := pgName(schema, table)
	return postgresBatchQueries{
		insert: `INSERT INTO ` + t + ` (consumer, key, fingerprint) SELECT $1, k, f FROM unnest($2::text[], $3::bytea[]) WITH ORDINALITY AS u(k, f, o) ORDER BY o ON CONFLICT DO NOTHING RETURNING key`,
		stored: `SELECT key, fingerprint FROM ` + t + ` WHERE consumer = $1 AND key = ANY($2::text[])`,
	}
}

// batchArgs returns the statements' arrays: the keys and their fingerprints.
func batchArgs(recs []contract.Record) (keys []string, fingerprints [][]byte) {
	keys = make([]string, len(recs))
	fingerprints = make([][]byte, len(recs))
	for i, r := range recs {
		keys[i], fingerprints[i] = r.Key, r.Fingerprint
	}
	return keys, fingerprints
}

// batchVerdicts turns the keys an insert returned into a BatchClaim without its
// transaction, and lists the duplicates whose stored fingerprints are to be read.
func batchVerdicts(recs []contract.Record, inserted map[string]bool) (contract.BatchClaim, []string) {
	claim := contract.BatchClaim{Duplicate: make([]bool, len(recs)), Fingerprint: make([][]byte, len(recs))}
	var dups []string
	for i, r := range recs {
		if !inserted[r.Key] {
			claim.Duplicate[i] = true
			dups = append(dups, r.Key)
		}
	}
	return claim, dups
}

// setStored fills in the duplicates' stored fingerprints; a duplicate whose row is gone
// (Forget, a purge) since the insert makes the claim contended, as for one key.
func setStored(recs []contract.Record, claim contract.BatchClaim, stored map[string][]byte) error {
	for i, r := range recs {
		if !claim.Duplicate[i] {
			continue
		}
		fp, ok := stored[r.Key]
		if !ok {
			return fmt.Errorf("inbox: key %q vanished while being claimed: %w", r.Key, contract.ErrContended)
		}
		claim.Fingerprint[i] = fp
	}
	return nil
}

// ClaimBatch implements BatchStore.
func (s *Store) ClaimBatch(ctx context.Context, recs []contract.Record) (contract.BatchClaim, error) {
	if err := ctx.Err(); err != nil { // pgx would close the connection: see Claim
		return contract.BatchClaim{}, s.wrap("beginning the transaction", err)
	}
	if s.folded != nil {
		return s.folded.claimBatch(ctx, recs)
	}
	tx, err := s.db.BeginTx(ctx, s.cfg.TxOptions)
	if err != nil {
		return contract.BatchClaim{}, s.wrap("beginning the transaction", err)
	}
	claim, err := s.claimBatch(ctx, tx, recs, false)
	if err != nil || claim.Tx == nil {
		err = contract.Join(err, rollbackPgx(ctx, tx))
		claim.Tx = nil
	}
	return claim, err
}

// ClaimBatchIn implements BatchStore; tx must be a pgx.Tx.
func (s *Store) ClaimBatchIn(ctx context.Context, tx any, recs []contract.Record) (contract.BatchClaim, error) {
	pgxTx, ok := tx.(pgx.Tx)
	if !ok {
		return contract.BatchClaim{}, fmt.Errorf("inbox: the transaction in the context is a %T; PostgresStore joins only a pgx.Tx", tx)
	}
	return s.claimBatch(ctx, pgxTx, recs, true)
}

// claimBatch inserts the keys in tx, with the lock timeout around the insert, in one
// round trip, and reads the duplicates' fingerprints in a second one when there are
// any. Claim.Tx is nil when no key is new.
func (s *Store) claimBatch(ctx context.Context, tx pgx.Tx, recs []contract.Record, joined bool) (contract.BatchClaim, error) {
	keys, fps := batchArgs(recs)
	batch := &pgx.Batch{}
	if s.sql.searchPath != "" && !joined { // as in claim: the handler's statements find the schema's tables
		batch.Queue(s.sql.searchPath)
	}
	if s.cfg.LockTimeout > 0 {
		batch.Queue(s.sql.lockSet, fmt.Sprintf("%dms", lockTimeoutMillis(s.cfg.LockTimeout)))
	}
	inserted := make(map[string]bool, len(recs))
	batch.Queue(s.batchSQL.insert, recs[0].Consumer, keys, fps).Query(func(rows pgx.Rows) error {
		var key string
		_, err := pgx.ForEachRow(rows, []any{&key}, func() error { inserted[key] = true; return nil })
		return err
	})
	if s.cfg.LockTimeout > 0 {
		batch.Queue(s.sql.lockReset)
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return contract.BatchClaim{}, s.wrap("inserting the keys", err)
	}
	claim, dups := batchVerdicts(recs, inserted)
	if len(dups) > 0 {
		rows, err := tx.Query(ctx, s.batchSQL.stored, recs[0].Consumer, dups)
		if err != nil {
			return contract.BatchClaim{}, s.wrap("reading the stored keys", err)
		}
		stored := make(map[string][]byte, len(dups))
		var key string
		var fp []byte
		if _, err := pgx.ForEachRow(rows, []any{&key, &fp}, func() error { stored[key] = fp; return nil }); err != nil {
			return contract.BatchClaim{}, s.wrap("reading the stored keys", err)
		}
		if err := setStored(recs, claim, stored); err != nil {
			return contract.BatchClaim{}, err
		}
	}
	if len(dups) < len(recs) {
		claim.Tx = &pgxInboxTx{tx: tx, store: s, joined: joined}
	}
	return claim, nil
}

// ClaimBatch implements BatchStore.
func (s *SQLStore) ClaimBatch(ctx context.Context, recs []contract.Record) (contract.BatchClaim, error) {
	var claim contract.BatchClaim
	_, err := sqlstore.ClaimInNewTx(ctx, s.db, s.cfg.Isolation, s.wrap, contract.Record{}, nil, func(tx *sql.Tx) (contract.Claim, error) {
		var err error
		claim, err = s.claimBatch(ctx, tx, recs, false)
		if err != nil || claim.Tx == nil {
			return contract.Claim{Duplicate: true}, err // ends the transaction
		}
		return contract.Claim{Tx: claim.Tx}, nil
	})
	if err != nil {
		return contract.BatchClaim{}, err
	}
	return claim, nil
}

// ClaimBatchIn implements BatchStore; tx must be a *sql.Tx.
func (s *SQLStore) ClaimBatchIn(ctx context.Context, tx any, recs []contract.Record) (contract.BatchClaim, error) {
	sqlTx, err := sqlstore.JoinedTx(tx, "SQLPostgresStore")
	if err != nil {
		return contract.BatchClaim{}, err
	}
	return s.claimBatch(ctx, sqlTx, recs, true)
}

// claimBatch is PostgresStore.claimBatch on database/sql: pgx's stdlib driver encodes
// the key and fingerprint slices as arrays.
func (s *SQLStore) claimBatch(ctx context.Context, tx *sql.Tx, recs []contract.Record, joined bool) (contract.BatchClaim, error) {
	keys, fps := batchArgs(recs)
	if s.sql.searchPath != "" && !joined {
		if _, err := tx.ExecContext(ctx, s.sql.searchPath); err != nil {
			return contract.BatchClaim{}, s.wrap("setting the search_path", err)
		}
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := tx.ExecContext(ctx, s.sql.lockSet, fmt.Sprintf("%dms", lockTimeoutMillis(s.cfg.LockTimeout))); err != nil {
			return contract.BatchClaim{}, s.wrap("setting the lock timeout", err)
		}
	}
	inserted, err := sqlKeys(ctx, tx, s.batchSQL.insert, recs[0].Consumer, keys, fps)
	if err != nil {
		return contract.BatchClaim{}, s.wrap("inserting the keys", err)
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := tx.ExecContext(ctx, s.sql.lockReset); err != nil {
			return contract.BatchClaim{}, s.wrap("resetting the lock timeout", err)
		}
	}
	claim, dups := batchVerdicts(recs, inserted)
	if len(dups) > 0 {
		stored, err := sqlStored(ctx, tx, s.batchSQL.stored, recs[0].Consumer, dups)
		if err != nil {
			return contract.BatchClaim{}, s.wrap("reading the stored keys", err)
		}
		if err := setStored(recs, claim, stored); err != nil {
			return contract.BatchClaim{}, err
		}
	}
	if len(dups) < len(recs) {
		claim.Tx = &sqlstore.Tx{SQL: tx, Joined: joined, Wrap: s.wrap}
	}
	return claim, nil
}

// sqlKeys runs a query returning keys, and returns them as a set.
func sqlKeys(ctx context.Context, tx *sql.Tx, query string, args ...any) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := map[string]bool{}
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return nil, err
		}
		keys[key] = true
	}
	return keys, rows.Err()
}

// sqlStored runs a query returning keys and their fingerprints.
func sqlStored(ctx context.Context, tx *sql.Tx, query string, args ...any) (map[string][]byte, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	stored := map[string][]byte{}
	for rows.Next() {
		var key string
		var fp []byte
		if err := rows.Scan(&key, &fp); err != nil {
			return nil, err
		}
		stored[key] = fp
	}
	return stored, rows.Err()
}
