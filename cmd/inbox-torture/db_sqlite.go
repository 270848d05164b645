package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// sqliteDB is the harness's SQLite: every process opens the same database file (-dsn, a
// path; by default a new file in the temporary directory, removed after the run) with
// sqlitestore.DSN's settings. There is no server and no connection to terminate: a
// worker the parent kills takes its locks with it (the operating system releases them),
// and its unfinished transaction is never seen (WAL frames without a commit).
type sqliteDB struct {
	db                    *sql.DB
	path                  string
	owned                 bool // the harness chose the file: drop removes it
	inboxT, ledgerT, accT string
	st                    *sqlitestore.Store
}

func openSQLite(ctx context.Context, o options, worker bool) (*sqliteDB, error) {
	s := &sqliteDB{path: o.dsn, owned: o.dsnChosen,
		inboxT: `"` + o.run + `"`, ledgerT: `"` + o.run + `_ledger"`, accT: `"` + o.run + `_accounts"`}
	var err error
	if s.db, err = sql.Open("sqlite", sqlitestore.DSN(o.dsn)); err != nil {
		return nil, err
	}
	if worker {
		s.db.SetMaxOpenConns(o.concurrency + 2)
	} else {
		s.db.SetMaxOpenConns(4)
	}
	if err := s.db.PingContext(ctx); err != nil {
		_ = s.db.Close()
		return nil, fmt.Errorf("SQLite file at -dsn %s: %w", o.dsn, err)
	}
	if s.st, err = sqlitestore.New(s.db, sqlitestore.Config{Table: o.run}); err != nil {
		_ = s.db.Close()
		return nil, err
	}
	return s, nil
}

func (s *sqliteDB) setup(ctx context.Context, accounts int) error {
	if err := s.st.CreateSchema(ctx); err != nil {
		return err
	}
	for _, stmt := range []string{
		`CREATE TABLE ` + s.ledgerT + ` (id INTEGER PRIMARY KEY, msg_key TEXT NOT NULL, account INTEGER NOT NULL, amount INTEGER NOT NULL)`,
		`CREATE TABLE ` + s.accT + ` (account INTEGER PRIMARY KEY, balance INTEGER NOT NULL DEFAULT 0)`,
		`WITH RECURSIVE a(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM a WHERE n + 1 < ?) INSERT INTO ` + s.accT + ` (account) SELECT n FROM a`,
	} {
		args := []any{}
		if stmt[0] == 'W' {
			args = append(args, accounts)
		}
		if _, err := s.db.ExecContext(ctx, stmt, args...); err != nil {
			return fmt.Errorf("creating the ledger: %w", err)
		}
	}
	return nil
}

// terminate has no connection to end: SQLite has no server.
func (s *sqliteDB) terminate(context.Context) (bool, error) { return false, nil }

// workerConns is 0: a killed worker's locks went with its process.
func (s *sqliteDB) workerConns(context.Context) (int, error) { return 0, nil }

func (s *sqliteDB) ledger(ctx context.Context) (ledgerState, error) {
	st := ledgerState{balances: map[int]int64{}}
	rows, err := s.db.QueryContext(ctx, `SELECT msg_key, account, amount FROM `+s.ledgerT)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var e entry
		if err := rows.Scan(&e.key, &e.account, &e.amount); err != nil {
			return st, errors.Join(err, rows.Close())
		}
		st.entries = append(st.entries, e)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return st, err
	}
	if rows, err = s.db.QueryContext(ctx, `SELECT account, balance FROM `+s.accT); err != nil {
		return st, err
	}
	for rows.Next() {
		var a int
		var b int64
		if err := rows.Scan(&a, &b); err != nil {
			return st, errors.Join(err, rows.Close())
		}
		st.balances[a] = b
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return st, err
	}
	if rows, err = s.db.QueryContext(ctx, `SELECT "key" FROM `+s.inboxT+` WHERE "consumer" = ?`, consumer); err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return st, err
		}
		st.keys = append(st.keys, k)
	}
	return st, rows.Err()
}

func (s *sqliteDB) drop(ctx context.Context) error {
	if s.owned {
		_ = s.db.Close()
		var errs []error
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(s.path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, t := range []string{s.inboxT, `"` + s.inboxT[1:len(s.inboxT)-1] + `_attempts"`, s.ledgerT, s.accT} {
		if _, err := s.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+t); err != nil {
			return err
		}
	}
	return nil
}

func (s *sqliteDB) store() inbox.Store { return s.st }

func (s *sqliteDB) credit(ctx context.Context, key string, account, amount int) error {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok {
		return fmt.Errorf("no *sql.Tx in the context")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.ledgerT+` (msg_key, account, amount) VALUES (?, ?, ?)`, key, account, amount); err != nil {
		return err
	}
	sleepUpTo(ctx)
	_, err := tx.ExecContext(ctx, `UPDATE `+s.accT+` SET balance = balance + ? WHERE account = ?`, amount, account)
	return err
}

func (s *sqliteDB) close() { _ = s.db.Close() }
