package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// Claim implements Store, for the inbox (not for you).
func (s *Store) Claim(ctx context.Context, rec contract.Record) (contract.Claim, error) {
	s.prepareInsert(ctx)
	if s.cfg.LockTimeout > 0 && rec.Attempt != "" && s.server.Load() == nil {
		// Asked before the transaction begins: a first read in it would take its
		// REPEATABLE READ snapshot before the claim's wait, and the count needs one after.
		_, _ = s.serverInfo(ctx, s.db)
	}
	return sqlstore.ClaimInNewTx(ctx, s.db, s.beginIsolation(ctx), s.wrap, rec, mysqlAttempts{s}, func(tx *sql.Tx) (contract.Claim, error) {
		return s.claim(ctx, tx, rec, false)
	})
}

// ClaimIn implements Store, for the inbox (not for you); tx must be a *sql.Tx, from any
// handle on the same server.
func (s *Store) ClaimIn(ctx context.Context, tx any, rec contract.Record) (contract.Claim, error) {
	sqlTx, err := sqlstore.JoinedTx(tx, "MySQLStore")
	if err != nil {
		return contract.Claim{}, err
	}
	return sqlstore.ClaimJoined(ctx, s.db, sqlTx, rec, mysqlAttempts{s}, s.wrap, func(tx *sql.Tx) (contract.Claim, error) {
		return s.claim(ctx, tx, rec, true)
	})
}

// claim inserts the key. A duplicate fails with error 1062, which in InnoDB undoes that
// statement only, not the transaction; then, and only then, a second statement reads what
// the first delivery stored.
func (s *Store) claim(ctx context.Context, tx *sql.Tx, rec contract.Record, joined bool) (contract.Claim, error) {
	err := s.insert(ctx, tx, rec, joined)
	var myErr *mysql.MySQLError
	if !errors.As(err, &myErr) || myErr.Number != mysqlDuplicateEntry {
		if err != nil {
			return contract.Claim{}, s.wrap("inserting the key", err)
		}
		return contract.Claim{Tx: &sqlstore.Tx{SQL: tx, Joined: joined, Wrap: s.wrap, SetOutput: s.setOutput(rec, joined)}}, nil
	}
	if stmt := s.storedStmt.Load(); stmt != nil && !joined {
		return sqlstore.ReadStored(ctx, tx, tx.StmtContext(ctx, stmt), rec, s.wrap)
	}
	return sqlstore.ReadStored(ctx, tx, s.sql.stored, rec, s.wrap)
}

// preparer is what *sql.DB has beyond SQLDB to prepare statements.
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// prepareInsert prepares the key's INSERT once, when db can prepare. It runs before a
// transaction begins, never while one is held: preparing takes a connection of the
// pool, which a pool of one (or a pool drained by waiting claims) would not have. A
// failure leaves the plain path.
func (s *Store) prepareInsert(ctx context.Context) {
	p, ok := s.db.(preparer)
	if !ok || s.insertStmt.Load() != nil {
		return
	}
	s.prepareMu.Lock()
	defer s.prepareMu.Unlock()
	if s.insertStmt.Load() == nil {
		// Prepared on one connection now, and by database/sql on each other one the first
		// time a transaction there uses it.
		setOutput, err1 := p.PrepareContext(ctx, s.sql.setOutput)
		stored, err2 := p.PrepareContext(ctx, s.sql.stored)
		committed, err3 := p.PrepareContext(ctx, s.sql.committed)
		if err1 == nil && err2 == nil && err3 == nil {
			s.setOutputStmt.Store(setOutput)
			s.storedStmt.Store(stored)
			s.committedStmt.Store(committed)
		}
		if prepared, err := p.PrepareContext(ctx, s.sql.insert); err == nil {
			s.insertStmt.Store(prepared)
		}
	}
}

// execInsert runs the insert in tx, through the prepared statement once there is one.
// A joined transaction may come from another *sql.DB, which cannot use a statement
// prepared on the store's: it runs the plain statement.
func (s *Store) execInsert(ctx context.Context, tx *sql.Tx, rec contract.Record, joined bool) error {
	var err error
	if stmt := s.insertStmt.Load(); stmt != nil && !joined {
		_, err = tx.StmtContext(ctx, stmt).ExecContext(ctx, rec.Consumer, rec.Key, rec.Fingerprint)
	} else {
		_, err = tx.ExecContext(ctx, s.sql.insert, rec.Consumer, rec.Key, rec.Fingerprint)
	}
	return err
}

// insert inserts rec's key, under the configured lock wait timeout if there is one.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, rec contract.Record, joined bool) error {
	if s.cfg.LockTimeout <= 0 {
		return s.execInsert(ctx, tx, rec, joined)
	}
	server, err := s.serverInfo(ctx, tx)
	if err != nil {
		return fmt.Errorf("reading the server version: %w", err)
	}
	if server.mariaDB {
		_, err := tx.ExecContext(ctx, s.sql.insertBounded, rec.Consumer, rec.Key, rec.Fingerprint)
		return err
	}
	if _, err = tx.ExecContext(ctx, s.sql.lockSet); err != nil {
		err = fmt.Errorf("setting innodb_lock_wait_timeout: %w", err)
	} else {
		err = s.execInsert(ctx, tx, rec, joined)
	}
	// Restore the session's value whatever happened, so that the connection goes back
	// to the pool as it came. A transaction the store began is still open here, even
	// when ctx ended (see claimInNewTx); a statement the driver gave up on midway closed
	// the connection, which then leaves the pool.
	if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), s.sql.lockRestored); rerr != nil && err == nil {
		return fmt.Errorf("restoring innodb_lock_wait_timeout: %w", rerr)
	}
	return err
}

// mysqlServer is what the store needs to know of the server.
type mysqlServer struct {
	mariaDB   bool
	maxPacket int // max_allowed_packet
}

// serverInfo asks the server, once, what the store needs to know of it.
func (s *Store) serverInfo(ctx context.Context, tx sqlstore.Queryer) (mysqlServer, error) {
	if known := s.server.Load(); known != nil {
		return *known, nil
	}
	s.serverMu.Lock()
	defer s.serverMu.Unlock()
	if known := s.server.Load(); known != nil {
		return *known, nil
	}
	var version string
	var packet int
	if err := tx.QueryRowContext(ctx, "SELECT VERSION(), @@max_allowed_packet").Scan(&version, &packet); err != nil {
		return mysqlServer{}, err
	}
	known := &mysqlServer{mariaDB: strings.Contains(version, "MariaDB"), maxPacket: packet}
	s.server.Store(known)
	return *known, nil
}

// ReadStored implements storedReader: the row a committed key's first delivery stored,
// read outside any transaction, through a statement prepared once per connection.
func (s *Store) ReadStored(ctx context.Context, rec contract.Record) (contract.Claim, bool, error) {
	s.prepareInsert(ctx)
	var row *sql.Row
	if stmt := s.committedStmt.Load(); stmt != nil {
		row = stmt.QueryRowContext(ctx, rec.Consumer, rec.Key)
	} else {
		row = s.db.QueryRowContext(ctx, s.sql.committed, rec.Consumer, rec.Key)
	}
	claim := contract.Claim{Duplicate: true}
	err := row.Scan(&claim.Fingerprint, &claim.Output)
	if errors.Is(err, sql.ErrNoRows) {
		return contract.Claim{}, false, nil
	}
	if err != nil {
		return contract.Claim{}, false, s.wrap("reading the stored key", err)
	}
	return claim, true, nil
}
