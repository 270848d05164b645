package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
)

// postgres is the harness's PostgreSQL: worker connections carry the application_name
// inbox-torture-<run>, which pg_stat_activity shows.
type postgres struct {
	pool                  *pgxpool.Pool
	run, app              string
	inboxT, ledgerT, accT string
	st                    *inbox.PostgresStore
}

func openPostgres(ctx context.Context, o options, worker bool) (*postgres, error) {
	cfg, err := pgxpool.ParseConfig(o.dsn)
	if err != nil {
		return nil, fmt.Errorf("-dsn: %w", err)
	}
	p := &postgres{run: o.run, app: "inbox-torture-" + o.run}
	if worker {
		cfg.ConnConfig.RuntimeParams["application_name"] = p.app
		cfg.MaxConns = int32(o.concurrency + 2)
	} else {
		cfg.ConnConfig.RuntimeParams["application_name"] = "inbox-torture-parent"
		cfg.MaxConns = 4
	}
	if p.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	if err := p.pool.Ping(ctx); err != nil {
		p.pool.Close()
		return nil, fmt.Errorf("PostgreSQL at -dsn: %w", err)
	}
	p.inboxT = pgx.Identifier{o.run}.Sanitize()
	p.ledgerT = pgx.Identifier{o.run + "_ledger"}.Sanitize()
	p.accT = pgx.Identifier{o.run + "_accounts"}.Sanitize()
	if p.st, err = inbox.NewPostgresStore(p.pool, inbox.PostgresConfig{Table: o.run}); err != nil {
		p.pool.Close()
		return nil, err
	}
	return p, nil
}

func (p *postgres) setup(ctx context.Context, accounts int) error {
	if err := p.st.CreateSchema(ctx); err != nil {
		return err
	}
	_, err := p.pool.Exec(ctx, `CREATE TABLE `+p.ledgerT+` (id bigserial PRIMARY KEY, msg_key text NOT NULL, account int NOT NULL, amount int NOT NULL);
		CREATE TABLE `+p.accT+` (account int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`)
	if err != nil {
		return fmt.Errorf("creating the ledger: %w", err)
	}
	_, err = p.pool.Exec(ctx, `INSERT INTO `+p.accT+` (account) SELECT generate_series(0, $1 - 1)`, accounts)
	return err
}

func (p *postgres) terminate(ctx context.Context) (bool, error) {
	var done bool
	err := p.pool.QueryRow(ctx, `SELECT coalesce((SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 ORDER BY (state <> 'idle') DESC, random() LIMIT 1), false)`, p.app).Scan(&done)
	return done, err
}

func (p *postgres) workerConns(ctx context.Context) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, p.app).Scan(&n)
	return n, err
}

func (p *postgres) ledger(ctx context.Context) (ledgerState, error) {
	s := ledgerState{balances: map[int]int64{}}
	rows, err := p.pool.Query(ctx, `SELECT msg_key, account, amount FROM `+p.ledgerT)
	if err != nil {
		return s, err
	}
	if s.entries, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (entry, error) {
		var e entry
		return e, r.Scan(&e.key, &e.account, &e.amount)
	}); err != nil {
		return s, err
	}
	rows, err = p.pool.Query(ctx, `SELECT account, balance FROM `+p.accT)
	if err != nil {
		return s, err
	}
	var a int
	var b int64
	if _, err := pgx.ForEachRow(rows, []any{&a, &b}, func() error { s.balances[a] = b; return nil }); err != nil {
		return s, err
	}
	rows, err = p.pool.Query(ctx, `SELECT key FROM `+p.inboxT+` WHERE consumer = $1`, consumer)
	if err != nil {
		return s, err
	}
	if s.keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return s, err
	}
	err = p.pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset), 0) FROM `+pgx.Identifier{p.run + "_offsets"}.Sanitize()+` WHERE consumer = $1`, consumer).Scan(&s.offsets)
	return s, err
}

func (p *postgres) drop(ctx context.Context) error {
	_, err := p.pool.Exec(ctx, `DROP TABLE IF EXISTS `+p.inboxT+`, `+pgx.Identifier{p.run + "_attempts"}.Sanitize()+`, `+pgx.Identifier{p.run + "_offsets"}.Sanitize()+`, `+p.ledgerT+`, `+p.accT)
	return err
}

func (p *postgres) store() inbox.Store { return p.st }

func (p *postgres) credit(ctx context.Context, key string, account, amount int) error {
	tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
	if !ok {
		return fmt.Errorf("no pgx.Tx in the context")
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+p.ledgerT+` (msg_key, account, amount) VALUES ($1, $2, $3)`, key, account, amount); err != nil {
		return err
	}
	sleepUpTo(ctx)
	_, err := tx.Exec(ctx, `UPDATE `+p.accT+` SET balance = balance + $2 WHERE account = $1`, account, amount)
	return err
}

func (p *postgres) close() { p.pool.Close() }
