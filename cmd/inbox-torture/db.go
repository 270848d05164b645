package main

import (
	"context"
	"fmt"

	"github.com/watermill-inbox/inbox"
)

// consumer is the one consumer name all workers share.
const consumer = "torture"

// database is what the harness needs of one database: the parent creates the tables,
// terminates worker connections and checks the ledger; a worker gets a store and credits
// through the inbox transaction.
type database interface {
	// setup creates the inbox, ledger and account tables of the run.
	setup(ctx context.Context, accounts int) error
	// terminate ends one worker connection on the server side, preferring one inside a
	// transaction, and reports whether there was one to end.
	terminate(ctx context.Context) (bool, error)
	// workerConns returns how many worker connections the server still has.
	workerConns(ctx context.Context) (int, error)
	// ledger returns the committed ledger entries, the balances and the inbox keys.
	ledger(ctx context.Context) (ledgerState, error)
	// drop removes the run's tables.
	drop(ctx context.Context) error

	// store returns the worker's inbox store.
	store() inbox.Store
	// credit applies message key's effect through the inbox transaction in ctx.
	credit(ctx context.Context, key string, account, amount int) error

	close()
}

// ledgerState is what the database committed.
type ledgerState struct {
	entries  []entry       // one per ledger row
	balances map[int]int64 // account → balance
	keys     []string      // inbox keys of the consumer
	offsets  int64         // the sum of the consumer's stored next offsets (offset mode)
}

type entry struct {
	key             string
	account, amount int
}

// openDatabase connects to o.db; worker connections are tagged so the parent can find
// (and terminate) them.
func openDatabase(ctx context.Context, o options, worker bool) (database, error) {
	if o.tenants > 0 {
		return openTenants(ctx, o, worker)
	}
	switch o.db {
	case "postgres":
		return openPostgres(ctx, o, worker)
	case "mariadb", "mysql", "tidb":
		return openMariaDB(ctx, o, worker)
	case "redis":
		return openRedis(ctx, o, worker)
	case "vitess":
		return openVitess(ctx, o, worker)
	case "sqlite":
		return openSQLite(ctx, o, worker)
	}
	return nil, fmt.Errorf("unknown database %q", o.db)
}
