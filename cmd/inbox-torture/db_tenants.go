package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
)

// tenants is the harness over -tenants databases: message i belongs to tenant t<i%N>,
// whose database (PostgreSQL: <run>_t<n> on the DSN's server; MariaDB: the run database
// <run>_t<n>) holds its inbox, ledger and accounts. Workers route through an
// inbox.TenantStore that opens a tenant's pool on its first message; the parent checks
// each tenant's ledger on its own, so a message applied in another tenant's database,
// or a key left there, is a failure even when the totals add up.
type tenants struct {
	o     options
	subs  []database // parent: every tenant's, opened at once
	admin *pgxpool.Pool

	// Worker: the TenantStore, and the tenants it opened, for credit.
	ts     *inbox.TenantStore
	mu     sync.Mutex
	opened map[string]database
}

// tenantName names tenant n.
func tenantName(n int) string { return "t" + strconv.Itoa(n) }

// tenantOf returns the tenant of message i.
func tenantOf(o options, i int) string { return tenantName(i % o.tenants) }

// tenantOptions are the options of tenant n's own database.
func tenantOptions(o options, n int) (options, error) {
	so := o
	so.tenants = 0
	switch o.db {
	case "postgres":
		u, err := url.Parse(o.dsn)
		if err != nil {
			return so, fmt.Errorf("-dsn: %w", err)
		}
		u.Path = "/" + o.run + "_" + tenantName(n)
		so.dsn = u.String()
	case "mariadb", "mysql":
		so.run = o.run + "_" + tenantName(n) // its database and tables
	default:
		return so, fmt.Errorf("-tenants runs on postgres, mariadb or mysql, not %s", o.db)
	}
	return so, nil
}

func openTenants(ctx context.Context, o options, worker bool) (*tenants, error) {
	t := &tenants{o: o, opened: map[string]database{}}
	if worker {
		ts, err := inbox.NewTenantStore(inbox.TenantConfig{Lookup: t.lookup})
		if err != nil {
			return nil, err
		}
		t.ts = ts
		return t, nil
	}
	if o.db == "postgres" { // the tenants' databases exist before their pools connect
		admin, err := pgxpool.New(ctx, o.dsn)
		if err != nil {
			return nil, fmt.Errorf("-dsn: %w", err)
		}
		t.admin = admin
		for n := range o.tenants {
			name := pgx.Identifier{o.run + "_" + tenantName(n)}.Sanitize()
			if _, err := admin.Exec(ctx, `CREATE DATABASE `+name+` TEMPLATE template0`); err != nil {
				t.close()
				return nil, fmt.Errorf("creating the database of tenant %s: %w", tenantName(n), err)
			}
		}
	}
	for n := range o.tenants {
		so, err := tenantOptions(o, n)
		if err == nil {
			var sub database
			if sub, err = openDatabase(ctx, so, false); err == nil {
				t.subs = append(t.subs, sub)
			}
		}
		if err != nil {
			t.close()
			_ = t.drop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return t, nil
}

// lookup opens a tenant's database for a worker, on its first message.
func (t *tenants) lookup(ctx context.Context, tenant string) (inbox.Tenant, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(tenant, "t"))
	if err != nil || !strings.HasPrefix(tenant, "t") || n < 0 || n >= t.o.tenants {
		return inbox.Tenant{}, fmt.Errorf("%w: %q is not one of -tenants %d", inbox.ErrUnknownTenant, tenant, t.o.tenants)
	}
	so, err := tenantOptions(t.o, n)
	if err != nil {
		return inbox.Tenant{}, err
	}
	sub, err := openDatabase(ctx, so, true)
	if err != nil {
		return inbox.Tenant{}, err
	}
	t.mu.Lock()
	t.opened[tenant] = sub
	t.mu.Unlock()
	return inbox.Tenant{Store: sub.store(), Close: sub.close}, nil
}

func (t *tenants) setup(ctx context.Context, accounts int) error {
	for n, sub := range t.subs {
		if err := sub.setup(ctx, accounts); err != nil {
			return fmt.Errorf("tenant %s: %w", tenantName(n), err)
		}
	}
	return nil
}

func (t *tenants) terminate(ctx context.Context) (bool, error) {
	return t.subs[rand.N(len(t.subs))].terminate(ctx)
}

// workerConns counts the workers' connections: PostgreSQL finds them by application
// name on the whole server, MariaDB by database.
func (t *tenants) workerConns(ctx context.Context) (int, error) {
	total := 0
	for _, sub := range t.subs {
		n, err := sub.workerConns(ctx)
		if err != nil {
			return 0, err
		}
		if t.o.db == "postgres" {
			return n, nil
		}
		total += n
	}
	return total, nil
}

// ledger is every tenant's ledger together, for the report.
func (t *tenants) ledger(ctx context.Context) (ledgerState, error) {
	all := ledgerState{balances: map[int]int64{}}
	states, err := t.tenantLedgers(ctx)
	for _, s := range states {
		all.entries = append(all.entries, s.entries...)
		all.keys = append(all.keys, s.keys...)
		for a, b := range s.balances {
			all.balances[a] += b
		}
	}
	return all, err
}

// tenantLedgers returns each tenant's ledger, in tenant order.
func (t *tenants) tenantLedgers(ctx context.Context) ([]ledgerState, error) {
	var states []ledgerState
	for n, sub := range t.subs {
		s, err := sub.ledger(ctx)
		if err != nil {
			return states, fmt.Errorf("tenant %s: %w", tenantName(n), err)
		}
		states = append(states, s)
	}
	return states, nil
}

func (t *tenants) drop(ctx context.Context) error {
	var errs []error
	for _, sub := range t.subs {
		errs = append(errs, sub.drop(ctx))
	}
	if t.admin != nil {
		for _, sub := range t.subs {
			sub.close() // the database's own pool, before DROP DATABASE
		}
		t.subs = nil
		for n := range t.o.tenants {
			_, err := t.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{t.o.run + "_" + tenantName(n)}.Sanitize()+` WITH (FORCE)`)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *tenants) store() inbox.Store { return t.ts }

// credit credits through the tenant's own database, the one the inbox transaction in ctx
// is on (its tables' names can be the same in every tenant).
func (t *tenants) credit(ctx context.Context, key string, account, amount int) error {
	tenant, ok := inbox.TenantFromContext(ctx)
	if !ok {
		return errors.New("no tenant in the handler's context")
	}
	t.mu.Lock()
	sub := t.opened[tenant]
	t.mu.Unlock()
	if sub == nil {
		return fmt.Errorf("tenant %s's database is not open", tenant)
	}
	return sub.credit(ctx, key, account, amount)
}

func (t *tenants) close() {
	if t.ts != nil {
		_ = t.ts.Close()
	}
	for _, sub := range t.subs {
		sub.close()
	}
	if t.admin != nil {
		t.admin.Close()
	}
}
