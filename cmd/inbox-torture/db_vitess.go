package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/watermill-inbox/inbox"
)

// vitess is the harness on a sharded Vitess keyspace through vtgate, whose DSN names the
// keyspace. A keyspace cannot be created through vtgate, so a run's tables are named
// after it: <run>, <run>_attempts, <run>_ledger and <run>_accounts. The inbox rows and
// the ledger entries are sharded by the message key (xxhash), the accounts by their
// number (hash): a message's transaction writes two or three shards, and only a
// two-phase commit (the DSN's transaction_mode=%27TWOPC%27) makes it atomic.
//
// The parent cannot list vtgate's client connections, so it terminates none; it waits
// instead for vtgate's unresolved distributed transactions to be resolved before it
// reads the ledger.
type vitess struct {
	db                    *sql.DB
	run                   string
	inboxT, ledgerT, accT string
	st                    *inbox.MySQLStore
}

func openVitess(ctx context.Context, o options, worker bool) (*vitess, error) {
	v := &vitess{run: o.run, inboxT: "`" + o.run + "`", ledgerT: "`" + o.run + "_ledger`", accT: "`" + o.run + "_accounts`"}
	var err error
	if v.db, err = sql.Open("mysql", o.dsn); err != nil {
		return nil, fmt.Errorf("-dsn: %w", err)
	}
	if worker {
		v.db.SetMaxOpenConns(o.concurrency + 2)
	} else {
		v.db.SetMaxOpenConns(4)
	}
	if err := v.db.PingContext(ctx); err != nil {
		_ = v.db.Close()
		return nil, fmt.Errorf("vtgate at -dsn: %w", err)
	}
	v.st, err = inbox.NewMySQLStore(v.db, inbox.MySQLConfig{Table: o.run, Engine: inbox.MySQLVitess})
	if err != nil {
		_ = v.db.Close()
		return nil, err
	}
	return v, nil
}

func (v *vitess) setup(ctx context.Context, accounts int) error {
	if err := v.st.CreateSchema(ctx); err != nil {
		return err
	}
	for _, stmt := range []string{
		`CREATE TABLE ` + v.ledgerT + ` (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_key VARBINARY(64) NOT NULL, account INT NOT NULL, amount INT NOT NULL) ENGINE=InnoDB`,
		"ALTER VSCHEMA ON " + v.ledgerT + " ADD VINDEX `xxhash`(`msg_key`) USING `xxhash`",
		`CREATE TABLE ` + v.accT + ` (account INT PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB`,
		"ALTER VSCHEMA ON " + v.accT + " ADD VINDEX `hash`(`account`) USING `hash`",
	} {
		if _, err := v.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("creating the ledger (%s): %w", stmt, err)
		}
	}
	for a := range accounts {
		if _, err := v.db.ExecContext(ctx, `INSERT INTO `+v.accT+` (account) VALUES (?)`, a); err != nil {
			return err
		}
	}
	return nil
}

func (v *vitess) terminate(context.Context) (bool, error) { return false, nil }

// workerConns counts vtgate's unresolved distributed transactions: the parent reads the
// ledger once there are none.
func (v *vitess) workerConns(ctx context.Context) (int, error) {
	rows, err := v.db.QueryContext(ctx, "SHOW UNRESOLVED TRANSACTIONS")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

func (v *vitess) ledger(ctx context.Context) (ledgerState, error) {
	m := &mariaDB{db: v.db, inboxT: v.inboxT, ledgerT: v.ledgerT, accT: v.accT}
	return m.ledger(ctx)
}

func (v *vitess) drop(ctx context.Context) error {
	for _, t := range []string{v.inboxT, "`" + v.run + "_attempts`", v.ledgerT, v.accT} {
		if _, err := v.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			return err
		}
		_, _ = v.db.ExecContext(ctx, "ALTER VSCHEMA DROP TABLE "+t)
	}
	return nil
}

func (v *vitess) store() inbox.Store { return v.st }

func (v *vitess) credit(ctx context.Context, key string, account, amount int) error {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok {
		return fmt.Errorf("no *sql.Tx in the context")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+v.ledgerT+` (msg_key, account, amount) VALUES (?, ?, ?)`, key, account, amount); err != nil {
		return err
	}
	sleepUpTo(ctx)
	_, err := tx.ExecContext(ctx, `UPDATE `+v.accT+` SET balance = balance + ? WHERE account = ?`, amount, account)
	return err
}

func (v *vitess) close() { _ = v.db.Close() }
