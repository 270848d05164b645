package postgresstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// ReadStored implements storedReader: the row a committed key's first delivery stored,
// read outside any transaction.
func (s *Store) ReadStored(ctx context.Context, rec contract.Record) (contract.Claim, bool, error) {
	claim := contract.Claim{Duplicate: true}
	err := s.db.QueryRow(ctx, s.sql.stored, rec.Consumer, rec.Key).Scan(&claim.Fingerprint, &claim.Output)
	if errors.Is(err, pgx.ErrNoRows) {
		return contract.Claim{}, false, nil
	}
	if err != nil {
		return contract.Claim{}, false, s.wrap("reading the stored key", err)
	}
	return claim, true, nil
}

// Claim implements Store, for the inbox (not for you).
func (s *SQLStore) Claim(ctx context.Context, rec contract.Record) (contract.Claim, error) {
	if rec.Attempt != "" {
		if err := s.pooler.claim(ctx); err != nil {
			return contract.Claim{}, err
		}
	}
	return sqlstore.ClaimInNewTx(ctx, s.db, s.cfg.Isolation, s.wrap, rec, pgSQLAttempts{s}, func(tx *sql.Tx) (contract.Claim, error) {
		return s.claim(ctx, tx, rec, false)
	})
}

// ClaimIn implements Store, for the inbox (not for you); tx must be a *sql.Tx.
func (s *SQLStore) ClaimIn(ctx context.Context, tx any, rec contract.Record) (contract.Claim, error) {
	sqlTx, err := sqlstore.JoinedTx(tx, "SQLPostgresStore")
	if err != nil {
		return contract.Claim{}, err
	}
	if rec.Attempt != "" {
		if err := s.pooler.claim(ctx); err != nil {
			return contract.Claim{}, err
		}
	}
	return sqlstore.ClaimJoined(ctx, s.db, sqlTx, rec, pgSQLAttempts{s}, s.wrap, func(tx *sql.Tx) (contract.Claim, error) {
		return s.claim(ctx, tx, rec, true)
	})
}

// claim inserts the key and, only when it was there already, reads what the first
// delivery stored: at READ COMMITTED that read takes a new snapshot after the insert's
// wait, so it sees the row of the transaction that made it wait.
func (s *SQLStore) claim(ctx context.Context, tx *sql.Tx, rec contract.Record, joined bool) (contract.Claim, error) {
	if s.sql.searchPath != "" && !joined {
		if _, err := tx.ExecContext(ctx, s.sql.searchPath); err != nil {
			return contract.Claim{}, s.wrap("setting the search_path", err)
		}
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := tx.ExecContext(ctx, s.sql.lockSet, fmt.Sprintf("%dms", lockTimeoutMillis(s.cfg.LockTimeout))); err != nil {
			return contract.Claim{}, s.wrap("setting the lock timeout", err)
		}
	}
	res, err := tx.ExecContext(ctx, s.sql.insert, rec.Consumer, rec.Key, rec.Fingerprint)
	if err != nil {
		return contract.Claim{}, s.wrap("inserting the key", err)
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := tx.ExecContext(ctx, s.sql.lockReset); err != nil {
			return contract.Claim{}, s.wrap("resetting the lock timeout", err)
		}
	}
	n, err := res.RowsAffected()
	if err != nil {
		return contract.Claim{}, s.wrap("inserting the key", err)
	}
	if n == 1 {
		return contract.Claim{Tx: &sqlstore.Tx{SQL: tx, Joined: joined, Wrap: s.wrap,
			SetOutput: func(ctx context.Context, tx *sql.Tx, output []byte) error {
				_, err := tx.ExecContext(ctx, s.sql.setOutput, rec.Consumer, rec.Key, output)
				return err
			}}}, nil
	}
	return sqlstore.ReadStored(ctx, tx, s.sql.stored, rec, s.wrap)
}

// ReadStored implements storedReader: the row a committed key's first delivery stored,
// read outside any transaction (pgx's driver caches the statement: one round trip).
func (s *SQLStore) ReadStored(ctx context.Context, rec contract.Record) (contract.Claim, bool, error) {
	claim := contract.Claim{Duplicate: true}
	err := s.db.QueryRowContext(ctx, s.sql.stored, rec.Consumer, rec.Key).Scan(&claim.Fingerprint, &claim.Output)
	if errors.Is(err, sql.ErrNoRows) {
		return contract.Claim{}, false, nil
	}
	if err != nil {
		return contract.Claim{}, false, s.wrap("reading the stored key", err)
	}
	return claim, true, nil
}

// Claim implements Store, for the inbox (not for you).
func (s *Store) Claim(ctx context.Context, rec contract.Record) (contract.Claim, error) {
	// pgx closes a connection whose BEGIN fails for any reason but a server error, a
	// context that already ended included: that would kill a *pgx.Conn handle.
	if err := ctx.Err(); err != nil {
		return contract.Claim{}, s.wrap("beginning the transaction", err)
	}
	if rec.Attempt != "" {
		if err := s.pooler.claim(ctx); err != nil {
			return contract.Claim{}, err
		}
	}
	if s.folded != nil {
		return s.folded.claim(ctx, rec)
	}
	if rec.Attempt != "" { // the attempt's lock is a session's: the claim's
		if s.pin == nil {
			return contract.Claim{}, fmt.Errorf("inbox: %w", s.attemptsUnsupported())
		}
		conn, release, err := s.pin(ctx)
		if err != nil {
			return contract.Claim{}, s.wrap("acquiring a connection", err)
		}
		return s.claimOn(ctx, conn, release, rec)
	}
	tx, err := s.db.BeginTx(ctx, s.cfg.TxOptions)
	if err != nil {
		return contract.Claim{}, s.wrap("beginning the transaction", err)
	}
	claim, err := s.claim(ctx, tx, rec, false)
	if err != nil || claim.Duplicate {
		err = contract.Join(err, rollbackPgx(ctx, tx))
	}
	return claim, err
}

// claimOn claims rec's key on conn, which the store holds until the transaction ends
// (release gives it back): it starts the attempt, begins, and claims with parameters.
func (s *Store) claimOn(ctx context.Context, conn *pgx.Conn, release func(), rec contract.Record) (contract.Claim, error) {
	if rec.Attempt != "" {
		if err := s.startPgx(ctx, conn, rec); err != nil {
			release()
			return contract.Claim{}, err
		}
	}
	tx, err := conn.BeginTx(ctx, s.cfg.TxOptions)
	if err != nil {
		err = s.wrap("beginning the transaction", err)
	} else {
		var claim contract.Claim
		if claim, err = s.claim(ctx, tx, rec, false); err == nil && !claim.Duplicate {
			claim.Tx.(*pgxInboxTx).release = release
			return claim, nil
		}
		if err == nil { // a duplicate: no attempt to count
			err = s.endClaimPgx(ctx, conn, tx, rec)
			release()
			return claim, err
		}
		err = contract.Join(err, rollbackPgx(ctx, tx))
	}
	if rec.Attempt != "" {
		_ = s.releasePgx(ctx, conn, rec, true) // a clean failure; EndAttempt if it fails
	}
	release()
	return contract.Claim{}, err
}

// endClaimPgx rolls back a duplicate's transaction and ends its attempt.
func (s *Store) endClaimPgx(ctx context.Context, conn *pgx.Conn, tx pgx.Tx, rec contract.Record) error {
	if rec.Attempt == "" {
		return rollbackPgx(ctx, tx)
	}
	return s.releasePgx(ctx, conn, rec, true)
}

// ClaimIn implements Store, for the inbox (not for you); tx must be a pgx.Tx.
func (s *Store) ClaimIn(ctx context.Context, tx any, rec contract.Record) (contract.Claim, error) {
	pgxTx, ok := tx.(pgx.Tx)
	if !ok {
		return contract.Claim{}, fmt.Errorf("inbox: the transaction in the context is a %T; PostgresStore joins only a pgx.Tx", tx)
	}
	if rec.Attempt != "" {
		if err := s.pooler.claim(ctx); err != nil {
			return contract.Claim{}, err
		}
		if err := s.startJoinedPgx(ctx, pgxTx, rec); err != nil {
			return contract.Claim{}, err
		}
	}
	claim, err := s.claim(ctx, pgxTx, rec, true)
	if rec.Attempt != "" && (err != nil || claim.Duplicate) {
		err = contract.Join(err, s.EndAttempt(ctx, rec))
	}
	return claim, err
}

// claim inserts the key and, when it was there already, reads what the first delivery
// stored. Both go in one round trip: at READ COMMITTED the read takes a new snapshot
// after the insert's wait, so it sees the row of the transaction that made it wait.
// With an attempt, the same round trip looks for the key's attempts that died.
func (s *Store) claim(ctx context.Context, tx pgx.Tx, rec contract.Record, joined bool) (contract.Claim, error) {
	batch := &pgx.Batch{}
	if s.sql.searchPath != "" && !joined {
		batch.Queue(s.sql.searchPath)
	}
	if s.cfg.LockTimeout > 0 {
		batch.Queue(s.sql.lockSet, fmt.Sprintf("%dms", lockTimeoutMillis(s.cfg.LockTimeout)))
	}
	batch.Queue(s.sql.insert, rec.Consumer, rec.Key, rec.Fingerprint)
	batch.Queue(s.sql.stored, rec.Consumer, rec.Key)
	if s.cfg.LockTimeout > 0 {
		batch.Queue(s.sql.lockReset)
	}
	inTx := rec.Attempt != "" && !joined && s.countInTx
	if inTx {
		batch.Queue(s.sql.attempts.dead, rec.Consumer, rec.Key, rec.Attempt)
	}
	results := tx.SendBatch(ctx, batch)
	defer results.Close()

	if s.sql.searchPath != "" && !joined {
		if _, err := results.Exec(); err != nil {
			return contract.Claim{}, s.wrap("setting the search_path", err)
		}
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := results.Exec(); err != nil {
			return contract.Claim{}, s.wrap("setting the lock timeout", err)
		}
	}
	tag, err := results.Exec()
	if err != nil {
		return contract.Claim{}, s.wrap("inserting the key", err)
	}
	var claim contract.Claim
	if err := results.QueryRow().Scan(&claim.Fingerprint, &claim.Output); err != nil {
		if errors.Is(err, pgx.ErrNoRows) { // deleted (Forget, purge) since the insert
			return contract.Claim{}, fmt.Errorf("inbox: the key vanished while being claimed: %w", contract.ErrContended)
		}
		return contract.Claim{}, s.wrap("reading the stored key", err)
	}
	if s.cfg.LockTimeout > 0 {
		if _, err := results.Exec(); err != nil {
			return contract.Claim{}, s.wrap("resetting the lock timeout", err)
		}
	}
	var dead []string
	if inTx {
		rows, err := results.Query()
		if err == nil {
			dead, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return contract.Claim{}, s.wrap("counting the attempts", err)
		}
	}
	if err := results.Close(); err != nil {
		return contract.Claim{}, s.wrap("claiming the key", err)
	}
	if tag.RowsAffected() == 0 {
		claim.Duplicate = true
		return claim, nil
	}
	claim = contract.Claim{Tx: &pgxInboxTx{tx: tx, store: s, rec: rec, joined: joined}}
	switch {
	case len(dead) > 0:
		if err := tx.QueryRow(ctx, s.sql.attempts.still, rec.Consumer, rec.Key, dead).Scan(&claim.Unfinished); err != nil {
			return contract.Claim{}, s.wrap("counting the attempts", err)
		}
	case rec.Attempt != "" && !inTx:
		var err error
		if claim.Unfinished, err = s.countAside(ctx, rec); err != nil {
			return contract.Claim{}, err
		}
	}
	return claim, nil
}
