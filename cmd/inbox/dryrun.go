package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/watermill-inbox/inbox"
)

// The --dry-run of purge and forget: what the command would change, changing nothing.

// purgeDryRun counts what a purge older than olderThan would delete, in store or in
// each tenant of tenants.
func purgeDryRun(ctx context.Context, stdout io.Writer, store inbox.Store, tenants *inbox.TenantStore, table string, olderThan time.Duration, asJSON bool) error {
	cutoff := time.Now().Add(-olderThan)
	type count struct {
		Tenant   string `json:"tenant,omitempty"`
		Keys     int64  `json:"would_delete"`
		Attempts int64  `json:"would_delete_attempts"`
		Error    string `json:"error,omitempty"`
	}
	var mu sync.Mutex // ForEachTenant runs tenants at once
	var counts []count
	var failed error
	countIn := func(ctx context.Context, tenant string, s inbox.Store) error {
		pc, ok := s.(inbox.PurgeCounter)
		if !ok {
			return fmt.Errorf("%w: this store cannot count what a purge would delete", errors.ErrUnsupported)
		}
		n, err := pc.CountPurge(ctx, cutoff)
		c := count{Tenant: tenant, Keys: n.Keys, Attempts: n.Attempts}
		if err != nil {
			c.Error = oneLine(strings.TrimPrefix(err.Error(), "inbox: "))
		}
		mu.Lock()
		defer mu.Unlock()
		counts = append(counts, c)
		return err
	}
	if tenants != nil {
		failed = tenants.ForEachTenant(ctx, countIn)
		slices.SortFunc(counts, func(a, b count) int { return strings.Compare(a.Tenant, b.Tenant) })
	} else {
		failed = countIn(ctx, "", store)
	}
	var keys, attempts int64
	for _, c := range counts {
		keys, attempts = keys+c.Keys, attempts+c.Attempts
	}
	if asJSON {
		out := struct {
			DryRun   bool    `json:"dry_run"`
			Keys     int64   `json:"would_delete"`
			Attempts int64   `json:"would_delete_attempts"`
			Table    string  `json:"table"`
			Older    string  `json:"older_than"`
			Cutoff   string  `json:"cutoff"`
			Tenants  []count `json:"tenants,omitempty"`
		}{true, keys, attempts, table, olderThan.String(), cutoff.UTC().Format(time.RFC3339), nil}
		if tenants != nil {
			out.Tenants = counts
		}
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			return err
		}
		return failed
	}
	if tenants != nil {
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TENANT\tWOULD DELETE\tATTEMPTS\tERROR")
		for _, c := range counts {
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", c.Tenant, c.Keys, c.Attempts, c.Error)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(stdout, "would delete %d keys and %d attempt rows processed before %s (older than %v) from %s; nothing deleted (--dry-run)\n",
		keys, attempts, cutoff.UTC().Format(time.RFC3339), olderThan, table); err != nil {
		return err
	}
	return failed
}

// forgetDryRun says whether the key is there, where the store can look it up outside a
// transaction (PostgreSQL, MySQL); elsewhere, whether its consumer has keys.
func forgetDryRun(ctx context.Context, stdout io.Writer, store inbox.Store, consumer, key, table string) error {
	if err := consumerHasKeys(ctx, store, consumer, key, table); err != nil {
		return err
	}
	reader, ok := store.(interface {
		ReadStored(ctx context.Context, rec inbox.Record) (inbox.Claim, bool, error)
	})
	if _, routed := store.(*inbox.TenantStore); !ok || routed { // a tenant's SQLite or Redis store reads nothing: not found would mislead
		_, err := fmt.Fprintf(stdout, "would forget key %q of consumer %q from %s if it is there (this store cannot look a key up on its own); nothing deleted (--dry-run)\n", key, consumer, table)
		return err
	}
	_, found, err := reader.ReadStored(ctx, inbox.Record{Consumer: consumer, Key: inbox.StorableKey(key)})
	if err != nil {
		return err
	}
	if !found {
		return noKey(ctx, store, consumer, key, table)
	}
	_, err = fmt.Fprintf(stdout, "would forget key %q of consumer %q from %s: its next delivery would be processed; nothing deleted (--dry-run)\n", key, consumer, table)
	return err
}

// noKey is the error of a key that is not there, naming the flag to check: --consumer
// when the consumer has no keys while others have, --key otherwise.
func noKey(ctx context.Context, store inbox.Store, consumer, key, table string) error {
	if err := consumerHasKeys(ctx, store, consumer, key, table); err != nil {
		return err
	}
	return fmt.Errorf("no key %q for consumer %q in %s: check --key (the key the key function derived) and --consumer (the handler name, unless Config.Consumer is set)", key, consumer, table)
}

// consumerHasKeys fails, naming --consumer, when the consumer has no keys while others
// have: a cheap look at the names next to it, where the store can (ConsumerNeighbours).
func consumerHasKeys(ctx context.Context, store inbox.Store, consumer, key, table string) error {
	if n, ok := store.(inbox.ConsumerNeighbours); ok {
		if others, err := n.NeighbourConsumers(ctx, consumer); err == nil && len(others) > 0 {
			return fmt.Errorf("no key %q for consumer %q in %s: --consumer %q has no keys there (consumers with keys next to it: %s): check --consumer (the handler name, unless Config.Consumer is set)",
				key, consumer, table, consumer, strings.Join(others, ", "))
		}
	}
	return nil
}
