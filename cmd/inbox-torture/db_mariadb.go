package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox"
)

// mariaDB is the harness's MariaDB (or MySQL): each run has a database of its own, named
// after it, that only the workers use as their default database, so the parent finds
// their connections in the process list by it. The parent stays on the DSN's database
// and names the run's tables in full.
type mariaDB struct {
	db                    *sql.DB
	run, dsn              string
	inboxT, ledgerT, accT string
	offsetsT              string // the offsets table; empty where there is none (Vitess)
	st                    *inbox.MySQLStore
	engine                inbox.MySQLEngine
}

func openMariaDB(ctx context.Context, o options, worker bool) (*mariaDB, error) {
	cfg, err := mysql.ParseDSN(o.dsn)
	if err != nil {
		return nil, fmt.Errorf("-dsn: %w", err)
	}
	m := &mariaDB{run: o.run, dsn: o.dsn}
	if o.db == "tidb" {
		m.engine = inbox.MySQLTiDB
	}
	q := func(name string) string { return "`" + o.run + "`.`" + name + "`" }
	m.inboxT, m.ledgerT, m.accT, m.offsetsT = q(o.run), q("ledger"), q("accounts"), q(o.run+"_offsets")
	if worker {
		cfg.DBName = o.run
	}
	if m.db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		return nil, err
	}
	if worker {
		m.db.SetMaxOpenConns(o.concurrency + 2)
	} else {
		m.db.SetMaxOpenConns(4)
	}
	if err := m.db.PingContext(ctx); err != nil {
		_ = m.db.Close()
		return nil, fmt.Errorf("MariaDB at -dsn: %w", err)
	}
	if m.st, err = inbox.NewMySQLStore(m.db, inbox.MySQLConfig{Table: o.run, Engine: m.engine}); err != nil {
		_ = m.db.Close()
		return nil, err
	}
	return m, nil
}

func (m *mariaDB) setup(ctx context.Context, accounts int) error {
	if _, err := m.db.ExecContext(ctx, "CREATE DATABASE `"+m.run+"`"); err != nil {
		return err
	}
	// The store creates its tables in its connection's default database: the run's.
	cfg, err := mysql.ParseDSN(m.dsn)
	if err != nil {
		return err
	}
	cfg.DBName = m.run
	runDB, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer runDB.Close()
	st, err := inbox.NewMySQLStore(runDB, inbox.MySQLConfig{Table: m.run, Engine: m.engine})
	if err != nil {
		return err
	}
	if err := st.CreateSchema(ctx); err != nil {
		return err
	}
	for _, stmt := range []string{
		`CREATE TABLE ` + m.ledgerT + ` (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_key VARCHAR(64) NOT NULL, account INT NOT NULL, amount INT NOT NULL) ENGINE=InnoDB`,
		`CREATE TABLE ` + m.accT + ` (account INT PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB`,
	} {
		if _, err := m.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("creating the ledger: %w", err)
		}
	}
	for a := range accounts {
		if _, err := m.db.ExecContext(ctx, `INSERT INTO `+m.accT+` (account) VALUES (?)`, a); err != nil {
			return err
		}
	}
	return nil
}

// mysqlBadProcesslistText is the error MySQL 9 fails a process list query with when
// another session's statement text, shown with its parameters (a binary fingerprint), is
// not valid UTF-8 (ER_CANNOT_CONVERT_STRING). It passes; the next query will do.
const mysqlBadProcesslistText = 3854

func (m *mariaDB) terminate(ctx context.Context) (bool, error) {
	var id int64
	err := m.db.QueryRowContext(ctx, `SELECT id FROM information_schema.PROCESSLIST WHERE db = ?
		ORDER BY (command <> 'Sleep') DESC, RAND() LIMIT 1`, m.run).Scan(&id)
	var myErr *mysql.MySQLError
	if err == sql.ErrNoRows || errors.As(err, &myErr) && myErr.Number == mysqlBadProcesslistText {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := m.db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil {
		if errors.As(err, &myErr) && myErr.Number == 1094 { // ER_NO_SUCH_THREAD: it went first
			return false, nil
		}
		return false, err
	}
	return true, nil
}

func (m *mariaDB) workerConns(ctx context.Context) (int, error) {
	var n int
	err := m.db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.PROCESSLIST WHERE db = ?`, m.run).Scan(&n)
	return n, err
}

func (m *mariaDB) ledger(ctx context.Context) (ledgerState, error) {
	s := ledgerState{balances: map[int]int64{}}
	rows, err := m.db.QueryContext(ctx, `SELECT msg_key, account, amount FROM `+m.ledgerT)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var e entry
		if err := rows.Scan(&e.key, &e.account, &e.amount); err != nil {
			return s, err
		}
		s.entries = append(s.entries, e)
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	if rows, err = m.db.QueryContext(ctx, `SELECT account, balance FROM `+m.accT); err != nil {
		return s, err
	}
	for rows.Next() {
		var a int
		var b int64
		if err := rows.Scan(&a, &b); err != nil {
			return s, err
		}
		s.balances[a] = b
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	if rows, err = m.db.QueryContext(ctx, `SELECT `+"`key`"+` FROM `+m.inboxT+` WHERE consumer = ?`, consumer); err != nil {
		return s, err
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return s, err
		}
		s.keys = append(s.keys, k)
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	if m.offsetsT == "" {
		return s, nil
	}
	err = m.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(next_offset), 0) FROM `+m.offsetsT+` WHERE consumer = ?`, consumer).Scan(&s.offsets)
	return s, err
}

func (m *mariaDB) drop(ctx context.Context) error {
	_, err := m.db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+m.run+"`")
	return err
}

func (m *mariaDB) store() inbox.Store { return m.st }

func (m *mariaDB) credit(ctx context.Context, key string, account, amount int) error {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok {
		return fmt.Errorf("no *sql.Tx in the context")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO ledger (msg_key, account, amount) VALUES (?, ?, ?)`, key, account, amount); err != nil {
		return err
	}
	sleepUpTo(ctx)
	_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + ? WHERE account = ?`, amount, account)
	return err
}

func (m *mariaDB) close() { _ = m.db.Close() }
