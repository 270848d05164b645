package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Batches (inbox.BatchStore, ADR 85): a batch is claimed as a single key is, in this
// process's turn at the write lock (the gate) and the transaction's first statement,
// with one multi-row INSERT … ON CONFLICT DO NOTHING RETURNING "key" per batchChunk
// keys: the rows it returns are the new keys; the others were committed before. Only
// when some key is a duplicate does one more statement read their fingerprints, which
// the insert's write lock lets it see as last committed. SQLite runs one writer at a
// time, so overlapping batches cannot deadlock: the second waits for the first's
// transaction to end (the gate in this process, busy_timeout across processes).
// RETURNING needs SQLite 3.35 or later.

var _ contract.BatchStore = (*Store)(nil)

// batchChunk bounds the keys of one statement: 2 parameters a key and 2 shared, well
// under SQLITE_MAX_VARIABLE_NUMBER (32766 since SQLite 3.32).
const batchChunk = 1000

// ClaimBatch implements inbox.BatchStore: in this process's turn at the write lock, on
// a connection of the store's own, it begins the batch's transaction and inserts the
// keys first. When none is new, the transaction is rolled back and BatchClaim.Tx is
// nil.
func (s *Store) ClaimBatch(ctx context.Context, recs []contract.Record) (contract.BatchClaim, error) {
	if err := s.batchSupported(ctx); err != nil {
		return contract.BatchClaim{}, err
	}
	l, err := s.enter(ctx, "claiming the keys")
	if err != nil {
		return contract.BatchClaim{}, err
	}
	tx, err := l.begin(ctx)
	if err != nil {
		return contract.BatchClaim{}, joinErrors(s.wrap("beginning the transaction", err), l.restore(ctx, l.conn), release(l))
	}
	t := &inboxTx{s: s, tx: tx, lease: l}
	claim, err := s.claimBatch(ctx, t, recs)
	if err != nil || claim.Tx == nil {
		return claim, joinErrors(err, rollback(tx), l.restore(ctx, l.conn), release(l))
	}
	return claim, nil
}

// ClaimBatchIn implements inbox.BatchStore; tx must be a *sql.Tx on the same database
// file, as for ClaimIn.
func (s *Store) ClaimBatchIn(ctx context.Context, tx any, recs []contract.Record) (contract.BatchClaim, error) {
	sqlTx, ok := tx.(*sql.Tx)
	if !ok {
		return contract.BatchClaim{}, fmt.Errorf("inbox: the transaction in the context is a %T; sqlitestore joins only a *sql.Tx", tx)
	}
	if err := ctx.Err(); err != nil {
		return contract.BatchClaim{}, fmt.Errorf("inbox: claiming the keys: %w", err)
	}
	if err := s.batchSupported(ctx); err != nil {
		return contract.BatchClaim{}, err
	}
	return s.claimBatch(ctx, &inboxTx{s: s, tx: sqlTx}, recs)
}

// batchSupported refuses batches on a SQLite library older than 3.35, which has no
// RETURNING.
func (s *Store) batchSupported(ctx context.Context) error {
	info, err := s.info(ctx)
	if err != nil {
		return err
	}
	if !info.returning {
		return fmt.Errorf("inbox: %w: sqlitestore claims batches with INSERT … RETURNING, which needs SQLite 3.35 or later: use a newer driver (modernc.org/sqlite and github.com/mattn/go-sqlite3 bundle one), or process the messages one by one with Process", errors.ErrUnsupported)
	}
	return nil
}

// claimBatch inserts recs' keys in t's transaction, under the wait bound of claim (the
// lease's busy_timeout, or LockTimeout around the inserts of a joined transaction), and
// reads the stored fingerprints of those that were there. recs all have one consumer.
func (s *Store) claimBatch(ctx context.Context, t *inboxTx, recs []contract.Record) (contract.BatchClaim, error) {
	claim := contract.BatchClaim{Duplicate: make([]bool, len(recs)), Fingerprint: make([][]byte, len(recs))}
	if len(recs) == 0 {
		return claim, nil
	}
	consumer := recs[0].Consumer
	fresh := make(map[string]bool, len(recs))
	err := s.bounded(ctx, t, func() error {
		at := now()
		for start := 0; start < len(recs); start += batchChunk {
			chunk := recs[start:min(start+batchChunk, len(recs))]
			if err := s.insertChunk(ctx, t.tx, consumer, at, chunk, fresh); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return contract.BatchClaim{}, s.wrap("inserting the keys", err)
	}
	var dups []int
	for i, r := range recs {
		if !fresh[r.Key] {
			dups = append(dups, i)
		}
	}
	if len(dups) > 0 {
		if err := s.readStored(ctx, t.tx, recs, dups, claim); err != nil {
			return contract.BatchClaim{}, err
		}
	}
	if len(dups) < len(recs) {
		claim.Tx = t
	}
	return claim, nil
}

// insertChunk runs one INSERT of chunk's keys and adds the keys it inserted to fresh.
func (s *Store) insertChunk(ctx context.Context, tx *sql.Tx, consumer string, at int64, chunk []contract.Record, fresh map[string]bool) error {
	var b strings.Builder
	b.WriteString(s.sql.batchInsert)
	args := make([]any, 0, 2+2*len(chunk))
	args = append(args, consumer, at)
	for i, r := range chunk {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(?1, ?%d, ?2, ?%d)", 3+2*i, 4+2*i)
		args = append(args, r.Key, blob(r.Fingerprint))
	}
	b.WriteString(` ON CONFLICT DO NOTHING RETURNING "key"`)
	rows, err := tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return err
		}
		fresh[key] = true
	}
	return rows.Err()
}

// readStored reads the stored fingerprints of recs[dups] into claim, and marks them
// duplicates. The batch's inserts hold the write lock: what it reads is the latest
// commit.
func (s *Store) readStored(ctx context.Context, tx *sql.Tx, recs []contract.Record, dups []int, claim contract.BatchClaim) error {
	found := make(map[string][]byte, len(dups))
	for start := 0; start < len(dups); start += batchChunk {
		chunk := dups[start:min(start+batchChunk, len(dups))]
		args := make([]any, 0, 1+len(chunk))
		args = append(args, recs[0].Consumer)
		marks := make([]string, len(chunk))
		for i, j := range chunk {
			marks[i] = "?"
			args = append(args, recs[j].Key)
		}
		rows, err := tx.QueryContext(ctx, s.sql.batchStored+strings.Join(marks, ", ")+")", args...)
		if err != nil {
			return s.wrap("reading the stored keys", err)
		}
		for rows.Next() {
			var key string
			var fp []byte
			if err := rows.Scan(&key, &fp); err != nil {
				_ = rows.Close()
				return s.wrap("reading the stored keys", err)
			}
			found[key] = fp
		}
		if err := rows.Err(); err != nil {
			_ = rows.Close()
			return s.wrap("reading the stored keys", err)
		}
		_ = rows.Close()
	}
	for _, j := range dups {
		fp, ok := found[recs[j].Key]
		if !ok {
			return fmt.Errorf("inbox: the key vanished while being claimed: %w", contract.ErrContended)
		}
		claim.Duplicate[j], claim.Fingerprint[j] = true, fp
	}
	return nil
}

// bounded runs fn, the claim's first statements, under the wait for the write lock: the
// lease's connection has busy_timeout set (enter) and it is restored after fn; a
// joined transaction gets LockTimeout set and restored around fn, when it is set.
func (s *Store) bounded(ctx context.Context, t *inboxTx, fn func() error) error {
	bound := t.lease
	if bound == nil && s.cfg.LockTimeout > 0 {
		bound = &lease{}
		if err := t.tx.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&bound.saved); err != nil {
			return fmt.Errorf("reading busy_timeout: %w", err)
		}
		if _, err := t.tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, boundMillis(ctx, s.cfg.LockTimeout))); err != nil {
			return joinErrors(fmt.Errorf("setting busy_timeout: %w", err), bound.restore(ctx, t.tx))
		}
	}
	err := fn()
	if bound != nil {
		if restoreErr := bound.restore(ctx, t.tx); restoreErr != nil && err == nil {
			return fmt.Errorf("restoring busy_timeout: %w", restoreErr)
		}
	}
	return err
}

// blob is b as a statement argument: NULL for nil (a driver may bind an empty blob).
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
