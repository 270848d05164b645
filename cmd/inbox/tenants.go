package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/watermill-inbox/inbox"
)

// A tenant list: one tenant per line, "TENANT DSN [SCHEMA]", for services with a
// database, a schema or a key prefix per tenant. SCHEMA is the PostgreSQL schema of the
// tenant's tables (a schema per tenant on one server), or for Redis the tenant's key
// prefix; MySQL databases are named in the DSN. Blank lines and lines starting with #
// are skipped. DSNs hold passwords: the list is read from a file (or "-", stdin), never
// from the command line.

// tenantEntry is one line of a tenant list.
type tenantEntry struct {
	name, dsn, schema string
}

// readTenants reads the tenant list at path ("-": stdin).
func readTenants(path string, stdin io.Reader) ([]tenantEntry, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading the tenant list: %w", err)
		}
		defer f.Close()
		r = f
	}
	var entries []tenantEntry
	seen := map[string]int{}
	scanner := bufio.NewScanner(r)
	for n := 1; scanner.Scan(); n++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || len(fields) > 3 {
			return nil, usagef("tenant list %s, line %d: want \"TENANT DSN [SCHEMA]\", got %d fields", path, n, len(fields))
		}
		e := tenantEntry{name: fields[0], dsn: fields[1]}
		if len(fields) == 3 {
			e.schema = fields[2]
		}
		if prev, ok := seen[e.name]; ok {
			return nil, usagef("tenant list %s, line %d: tenant %q is on line %d already", path, n, e.name, prev)
		}
		seen[e.name] = n
		entries = append(entries, e)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("reading the tenant list: %w", err)
	}
	if len(entries) == 0 {
		return nil, usagef("tenant list %s names no tenant", path)
	}
	return entries, nil
}

// openTenants returns a TenantStore over the listed tenants, each store on the tenant's
// DSN (and schema or prefix) and table, opened when first used, and a function that
// closes them all.
func openTenants(entries []tenantEntry, table string) (*inbox.TenantStore, func(), error) {
	byName := map[string]tenantEntry{}
	var names []string
	for _, e := range entries {
		byName[e.name] = e
		names = append(names, e.name)
	}
	ts, err := inbox.NewTenantStore(inbox.TenantConfig{
		Lookup: func(ctx context.Context, tenant string) (inbox.Tenant, error) {
			e, ok := byName[tenant]
			if !ok {
				return inbox.Tenant{}, fmt.Errorf("%w: %q is not in the tenant list", inbox.ErrUnknownTenant, tenant)
			}
			store, closeDB, err := openStoreIn(ctx, e.dsn, table, e.schema)
			if err != nil {
				return inbox.Tenant{}, err
			}
			return inbox.Tenant{Store: store, Close: closeDB}, nil
		},
		Tenants: func(context.Context) ([]string, error) { return names, nil },
	})
	if err != nil {
		return nil, nil, err
	}
	return ts, func() { _ = ts.Close() }, nil
}

// printTenantPurges prints what a purge across tenants did in each, and returns an error
// naming the tenants that failed (listErr when the list could not be read).
func printTenantPurges(stdout io.Writer, purges []inbox.TenantPurge, listErr error, table string, olderThan, elapsed time.Duration, asJSON, quiet bool) error {
	if purges == nil {
		return listErr
	}
	type tenantJSON struct {
		Tenant  string `json:"tenant"`
		Deleted int64  `json:"deleted"`
		Error   string `json:"error,omitempty"`
	}
	out := struct {
		Deleted        int64        `json:"deleted"`
		Table          string       `json:"table"`
		OlderThan      string       `json:"older_than"`
		ElapsedSeconds float64      `json:"elapsed_seconds"`
		Tenants        []tenantJSON `json:"tenants"`
	}{Table: table, OlderThan: olderThan.String(), ElapsedSeconds: elapsed.Seconds(), Tenants: []tenantJSON{}}
	var failed []string
	for _, p := range purges {
		out.Deleted += p.Deleted
		tj := tenantJSON{Tenant: p.Tenant, Deleted: p.Deleted}
		if p.Err != nil {
			tj.Error = oneLine(strings.TrimPrefix(p.Err.Error(), "inbox: "))
			failed = append(failed, p.Tenant)
		}
		out.Tenants = append(out.Tenants, tj)
	}
	var err error
	switch {
	case asJSON:
		err = json.NewEncoder(stdout).Encode(out)
	case !quiet:
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TENANT\tDELETED\tERROR")
		for _, t := range out.Tenants {
			fmt.Fprintf(w, "%s\t%d\t%s\n", t.Tenant, t.Deleted, t.Error)
		}
		fmt.Fprintf(w, "(all)\t%d\t\n", out.Deleted)
		if err = w.Flush(); err == nil {
			_, err = fmt.Fprintf(stdout, "deleted %d keys older than %v from %s in %d tenants in %v\n", out.Deleted, olderThan, table, len(purges), elapsed.Round(time.Millisecond))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("the purge failed in %d of %d tenants (%s): %w", len(failed), len(purges), strings.Join(failed, ", "), listErr)
	}
	return err
}

// printTenantStats prints the keys of every tenant, per consumer.
func printTenantStats(ctx context.Context, stdout io.Writer, ts *inbox.TenantStore, table string, asJSON bool) error {
	type consumerJSON struct {
		Consumer string    `json:"consumer"`
		Keys     int64     `json:"keys"`
		Oldest   time.Time `json:"oldest"`
	}
	type tenantJSON struct {
		Tenant    string         `json:"tenant"`
		Keys      int64          `json:"keys"`
		Consumers []consumerJSON `json:"consumers"`
	}
	var mu sync.Mutex
	var tenants []tenantJSON
	err := ts.ForEachTenant(ctx, func(ctx context.Context, tenant string, store inbox.Store) error {
		stats, err := store.Stats(ctx)
		tj := tenantJSON{Tenant: tenant, Consumers: []consumerJSON{}}
		for _, s := range stats {
			tj.Keys += s.Keys
			tj.Consumers = append(tj.Consumers, consumerJSON{s.Consumer, s.Keys, s.Oldest.UTC()})
		}
		mu.Lock()
		tenants = append(tenants, tj)
		mu.Unlock()
		return err
	})
	if err != nil {
		return err
	}
	sort.Slice(tenants, func(i, j int) bool { return tenants[i].Tenant < tenants[j].Tenant })
	out := struct {
		Table   string       `json:"table"`
		Keys    int64        `json:"keys"`
		Tenants []tenantJSON `json:"tenants"`
	}{Table: table, Tenants: tenants}
	for _, t := range tenants {
		out.Keys += t.Keys
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tCONSUMER\tKEYS\tOLDEST\tAGE")
	now := time.Now()
	for _, t := range tenants {
		if len(t.Consumers) == 0 {
			fmt.Fprintf(w, "%s\t-\t0\t-\t-\n", t.Tenant)
		}
		for _, c := range t.Consumers {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", t.Tenant, c.Consumer, c.Keys, c.Oldest.Format(time.RFC3339), age(now.Sub(c.Oldest)))
		}
	}
	fmt.Fprintf(w, "(all)\t\t%d\t\t\n", out.Keys)
	return w.Flush()
}
