package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// Batches on MySQL, MariaDB and TiDB: InnoDB has no INSERT that reports which rows of a
// multi-row insert conflicted, so the claim is optimistic. One multi-row INSERT of
// every key (sorted, so that overlapping batches wait for each other in the same order
// instead of deadlocking); when it succeeds, which is the common case, every key is new
// and it cost one statement. When a key is there already, error 1062 undoes that
// statement only, and a locking read of the batch's keys (which waits for a transaction
// holding one, and then sees the latest committed row) finds the duplicates with their
// fingerprints; a second INSERT claims the others. A key another transaction committed
// in between makes that INSERT fail with 1062 again: the read and insert are repeated,
// at most mysqlBatchTries times, then the claim is contended.
//
// The statements carry the keys as hexadecimal literals, X'...': the same text for any
// key bytes, sql_mode (NO_BACKSLASH_ESCAPES, ANSI_QUOTES) or character set, with no
// parameter to bind, so a batch costs one round trip even without interpolateParams.

var _ contract.BatchStore = (*Store)(nil)

const (
	// mysqlBatchChunk bounds the keys of one INSERT or read: 1000 keys of up to 255
	// bytes are at most about 600 KB of statement.
	mysqlBatchChunk = 1000
	// mysqlBatchTries bounds the insert-and-read rounds a claim tries before it is
	// contended.
	mysqlBatchTries = 8
)

// ClaimBatch implements BatchStore. On MySQLVitess it fails with errors.ErrUnsupported.
func (s *Store) ClaimBatch(ctx context.Context, recs []contract.Record) (contract.BatchClaim, error) {
	if err := s.batchSupported(); err != nil {
		return contract.BatchClaim{}, err
	}
	var claim contract.BatchClaim
	_, err := sqlstore.ClaimInNewTx(ctx, s.db, s.beginIsolation(ctx), s.wrap, contract.Record{}, nil, func(tx *sql.Tx) (contract.Claim, error) {
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
func (s *Store) ClaimBatchIn(ctx context.Context, tx any, recs []contract.Record) (contract.BatchClaim, error) {
	if err := s.batchSupported(); err != nil {
		return contract.BatchClaim{}, err
	}
	sqlTx, err := sqlstore.JoinedTx(tx, "MySQLStore")
	if err != nil {
		return contract.BatchClaim{}, err
	}
	return s.claimBatch(ctx, sqlTx, recs, true)
}

// batchSupported refuses batches on Vitess: a batch's keys live on many shards, which a
// transaction under SINGLE cannot span, and under TWOPC a multi-shard INSERT that fails
// on one shard (the optimistic claim's duplicate) makes vtgate roll back the whole
// transaction.
func (s *Store) batchSupported() error {
	if s.cfg.Engine == Vitess {
		return fmt.Errorf("inbox: %w: MySQLStore on MySQLVitess does not claim batches: the keys of a batch live on many shards, which a transaction under SINGLE cannot span, and under TWOPC vtgate rolls back the whole transaction when an INSERT fails on one of them; process the messages one by one with Process", errors.ErrUnsupported)
	}
	return nil
}

func (s *Store) claimBatch(ctx context.Context, tx *sql.Tx, recs []contract.Record, joined bool) (contract.BatchClaim, error) {
	claim := contract.BatchClaim{Duplicate: make([]bool, len(recs)), Fingerprint: make([][]byte, len(recs))}
	mine := make(map[string]bool, len(recs)) // keys this claim inserted
	var existing map[string][]byte           // keys found committed, with their fingerprints
	err := s.withLockTimeout(ctx, tx, func(bound string) error {
		for try := 0; ; try++ {
			var todo []contract.Record
			for _, r := range recs {
				if _, found := existing[r.Key]; !found && !mine[r.Key] {
					todo = append(todo, r)
				}
			}
			done, err := s.insertBatch(ctx, tx, bound, todo)
			for _, r := range done {
				mine[r.Key] = true
			}
			var myErr *mysql.MySQLError
			switch {
			case err == nil:
				return nil
			case !errors.As(err, &myErr) || myErr.Number != mysqlDuplicateEntry:
				return s.wrap("inserting the keys", err)
			case try == mysqlBatchTries-1:
				return fmt.Errorf("inbox: inserting the keys: other transactions committed keys of the batch %d times while it was claimed: %w", mysqlBatchTries, contract.ErrContended)
			}
			if existing, err = s.readStoredBatch(ctx, tx, bound, recs, mine); err != nil {
				return s.wrap("reading the stored keys", err)
			}
		}
	})
	if err != nil {
		return contract.BatchClaim{}, err
	}
	for i, r := range recs {
		if fp, found := existing[r.Key]; found {
			claim.Duplicate[i], claim.Fingerprint[i] = true, fp
		}
	}
	if len(mine) > 0 {
		claim.Tx = &sqlstore.Tx{SQL: tx, Joined: joined, Wrap: s.wrap}
	}
	return claim, nil
}

// insertBatch inserts recs, in chunks of mysqlBatchChunk keys, and returns the records
// of the chunks that went in: a chunk that fails (1062) inserted nothing.
func (s *Store) insertBatch(ctx context.Context, tx *sql.Tx, bound string, recs []contract.Record) ([]contract.Record, error) {
	head := bound + "INSERT INTO `" + s.cfg.Table + "` (`consumer`, `key`, `fingerprint`) VALUES "
	row := ")"
	if s.cfg.Engine == TiDB {
		head = bound + "INSERT INTO `" + s.cfg.Table + "` (`consumer`, `key`, `fingerprint`, `processed_at`) VALUES "
		row = ", UTC_TIMESTAMP(6))"
	}
	for start := 0; start < len(recs); start += mysqlBatchChunk {
		chunk := recs[start:min(start+mysqlBatchChunk, len(recs))]
		var b strings.Builder
		b.WriteString(head)
		for i, r := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(")
			b.WriteString(hexLiteral([]byte(r.Consumer)))
			b.WriteString(", ")
			b.WriteString(hexLiteral([]byte(r.Key)))
			b.WriteString(", ")
			if r.Fingerprint == nil {
				b.WriteString("NULL")
			} else {
				b.WriteString(hexLiteral(r.Fingerprint))
			}
			b.WriteString(row)
		}
		if _, err := tx.ExecContext(ctx, b.String()); err != nil {
			return recs[:start], err
		}
	}
	return recs, nil
}

// readStoredBatch reads, with a locking read, the keys of recs committed by others,
// with their fingerprints: a key another transaction holds is waited for, then seen as
// it committed (or not at all, when it rolled back). Keys in mine, which this claim
// inserted, are left out.
func (s *Store) readStoredBatch(ctx context.Context, tx *sql.Tx, bound string, recs []contract.Record, mine map[string]bool) (map[string][]byte, error) {
	lock := " LOCK IN SHARE MODE"
	if s.cfg.Engine == TiDB {
		lock = " FOR UPDATE"
	}
	stored := map[string][]byte{}
	for start := 0; start < len(recs); start += mysqlBatchChunk {
		chunk := recs[start:min(start+mysqlBatchChunk, len(recs))]
		var b strings.Builder
		b.WriteString(bound + "SELECT `key`, `fingerprint` FROM `" + s.cfg.Table + "` WHERE `consumer` = ")
		b.WriteString(hexLiteral([]byte(chunk[0].Consumer)))
		b.WriteString(" AND `key` IN (")
		for i, r := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(hexLiteral([]byte(r.Key)))
		}
		b.WriteString(")" + lock)
		rows, err := tx.QueryContext(ctx, b.String())
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var key, fp []byte
			if err := rows.Scan(&key, &fp); err != nil {
				_ = rows.Close()
				return nil, err
			}
			if !mine[string(key)] {
				stored[string(key)] = fp
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
	}
	return stored, nil
}

// withLockTimeout runs fn, the statements of a claim, under the configured lock wait
// bound: on MariaDB fn prefixes each statement with bound (SET STATEMENT ... FOR), on
// MySQL the session's value is set before and restored after, whatever happened (as
// for one key: see insert).
func (s *Store) withLockTimeout(ctx context.Context, tx *sql.Tx, fn func(bound string) error) error {
	if s.cfg.LockTimeout <= 0 {
		return fn("")
	}
	server, err := s.serverInfo(ctx, tx)
	if err != nil {
		return s.wrap("reading the server version", err)
	}
	if server.mariaDB {
		return fn(fmt.Sprintf("SET STATEMENT innodb_lock_wait_timeout = %d FOR ", mysqlLockSeconds(s.cfg.LockTimeout)))
	}
	if _, err := tx.ExecContext(ctx, s.sql.lockSet); err != nil {
		return s.wrap("setting innodb_lock_wait_timeout", err)
	}
	err = fn("")
	if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), s.sql.lockRestored); rerr != nil && err == nil {
		return s.wrap("restoring innodb_lock_wait_timeout", rerr)
	}
	return err
}

// mysqlLockSeconds is innodb_lock_wait_timeout for d: whole seconds, rounded up.
func mysqlLockSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// hexLiteral returns b as a MySQL hexadecimal literal, X'...': a binary string whatever
// the session's sql_mode and character set.
func hexLiteral(b []byte) string {
	return "X'" + hex.EncodeToString(b) + "'"
}
