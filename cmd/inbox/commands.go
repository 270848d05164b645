package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/watermill-inbox/inbox"
)

// errHelp reports that a command printed its help: exit status 0.
var errHelp = errors.New("help requested")

// commandFlags is a command's flag set, with its help text.
type commandFlags struct {
	*flag.FlagSet
	help func()
}

// newFlags returns a flag set for a command. Its help goes to stdout on --help only:
// parse errors are reported by run, in one line.
func newFlags(name, synopsis, about string, stdout io.Writer) commandFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return commandFlags{FlagSet: fs, help: func() {
		fmt.Fprintf(stdout, "Usage: inbox %s\n\n%s\n\nFlags:\n", synopsis, about)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}}
}

// parse parses args, flags and positional arguments in any order, and returns the
// positional ones.
func (fs commandFlags) parse(args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.help()
				return nil, errHelp
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// dbFlags are the flags of the commands that open the database, or every tenant's.
type dbFlags struct {
	dsn, table, schema, tenants string
	fs                          commandFlags
}

func (d *dbFlags) register(fs commandFlags) {
	d.fs = fs
	fs.StringVar(&d.dsn, "dsn", os.Getenv("INBOX_DSN"), "database `DSN`: postgres://..., mysql://user@tcp(host:port)/db, redis://... or sqlite:app.db (default $INBOX_DSN)")
	fs.StringVar(&d.table, "table", inbox.DefaultTable, "inbox `table` name")
	fs.StringVar(&d.schema, "schema", "", "PostgreSQL `schema` of the tables (default: the search_path's)")
	fs.StringVar(&d.tenants, "tenants", "", "tenant list `file` (\"-\": stdin), one \"TENANT DSN [SCHEMA]\" per line: run on every tenant instead of --dsn")
}

func (d *dbFlags) check() error {
	dsnGiven := false
	d.fs.Visit(func(f *flag.Flag) { dsnGiven = dsnGiven || f.Name == "dsn" })
	switch {
	case d.tenants != "" && (dsnGiven || d.schema != ""):
		return usagef("--tenants names each tenant's DSN and schema: drop --dsn and --schema")
	case d.tenants == "" && d.dsn == "":
		return usagef("--dsn is required (or set INBOX_DSN, or give --tenants)")
	}
	return nil
}

// open opens the database, or, with --tenants, a TenantStore over every tenant (nil
// otherwise), and returns a function that closes them.
func (d *dbFlags) open(ctx context.Context, stdin io.Reader) (inbox.Store, *inbox.TenantStore, func(), error) {
	if d.tenants == "" {
		store, closeDB, err := openStoreIn(ctx, d.dsn, d.table, d.schema)
		return store, nil, closeDB, err
	}
	entries, err := readTenants(d.tenants, stdin)
	if err != nil {
		return nil, nil, nil, err
	}
	ts, closeAll, err := openTenants(entries, d.table)
	return ts, ts, closeAll, err
}

func noPositional(positional []string) error {
	if len(positional) > 0 {
		return usagef("unexpected argument %q", positional[0])
	}
	return nil
}

func purgeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var db dbFlags
	var cfg inbox.PurgeConfig
	var asJSON, quiet, dryRun bool
	fs := newFlags("purge", "purge --dsn DSN --older-than DURATION [flags]",
		"Deletes the keys processed more than --older-than ago, in batches of --batch keys, each\n"+
			"its own short transaction. A purged key makes the next delivery of its message new\n"+
			"again: keep keys longer than a message can come back (topic retention, DLQ replay).\n"+
			"A cutoff younger than --min-retention is refused unless --force. --dry-run counts what\n"+
			"would be deleted and deletes nothing. For cron; a fleet of processes can purge\n"+
			"itself instead, one at a time (inbox.Retention).", stdout)
	db.register(fs)
	fs.DurationVar(&cfg.OlderThan, "older-than", 0, "delete keys processed more than this `duration` ago, e.g. 720h (required)")
	fs.DurationVar(&cfg.MinRetention, "min-retention", inbox.DefaultMinRetention, "refuse a cutoff younger than this `duration`: how long a message can come back")
	fs.BoolVar(&cfg.Force, "force", false, "purge even below --min-retention")
	fs.IntVar(&cfg.BatchSize, "batch", inbox.DefaultPurgeBatch, "keys deleted per transaction")
	fs.DurationVar(&cfg.Pause, "pause", 0, "pause between batches")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&quiet, "quiet", false, "print nothing but errors")
	fs.BoolVar(&dryRun, "dry-run", false, "count the keys a purge would delete, delete nothing")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case noPositional(positional) != nil:
		return noPositional(positional)
	case db.check() != nil:
		return db.check()
	case cfg.OlderThan <= 0:
		return usagef("--older-than is required: the age of the keys to delete, e.g. 720h")
	case cfg.MinRetention <= 0:
		return usagef("--min-retention must be positive")
	case cfg.BatchSize <= 0:
		return usagef("--batch must be positive")
	case asJSON && quiet:
		return usagef("--json and --quiet exclude each other")
	case dryRun && quiet:
		return usagef("--dry-run and --quiet exclude each other: a dry run prints what it would do")
	}
	if cfg.OlderThan < cfg.MinRetention && !cfg.Force {
		return fmt.Errorf("refusing to purge keys younger than %v: --min-retention is %v, and a message redelivered after its key is purged is processed again; purge older keys, lower --min-retention if messages cannot come back that late, or pass --force",
			cfg.OlderThan, cfg.MinRetention)
	}

	store, tenants, closeDB, err := db.open(ctx, os.Stdin)
	if err != nil {
		return err
	}
	defer closeDB()
	if dryRun {
		return purgeDryRun(ctx, stdout, store, tenants, db.table, cfg.OlderThan, asJSON)
	}

	start := time.Now()
	if !asJSON && !quiet && isTerminal(os.Stderr) {
		cfg.Progress = func(deleted int64) {
			elapsed := time.Since(start)
			fmt.Fprintf(stderr, "\rdeleted %d keys, %.0f keys/s, %s elapsed ", deleted, float64(deleted)/elapsed.Seconds(), elapsed.Round(100*time.Millisecond))
		}
	}
	if tenants != nil {
		purges, err := inbox.PurgeTenants(ctx, tenants, cfg)
		if cfg.Progress != nil {
			fmt.Fprintln(stderr)
		}
		return printTenantPurges(stdout, purges, err, db.table, cfg.OlderThan, time.Since(start), asJSON, quiet)
	}
	deleted, err := inbox.Purge(ctx, store, cfg)
	elapsed := time.Since(start)
	if cfg.Progress != nil {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		if deleted > 0 {
			return fmt.Errorf("after deleting %d keys: %w", deleted, err)
		}
		return err
	}
	switch {
	case asJSON:
		return json.NewEncoder(stdout).Encode(struct {
			Deleted        int64   `json:"deleted"`
			Table          string  `json:"table"`
			OlderThan      string  `json:"older_than"`
			ElapsedSeconds float64 `json:"elapsed_seconds"`
		}{deleted, db.table, cfg.OlderThan.String(), elapsed.Seconds()})
	case quiet:
		return nil
	}
	_, err = fmt.Fprintf(stdout, "deleted %d keys older than %v from %s in %v\n", deleted, cfg.OlderThan, db.table, elapsed.Round(time.Millisecond))
	return err
}

func schemaCmd(_ context.Context, args []string, stdout, _ io.Writer) error {
	var table string
	fs := newFlags("schema", "schema postgres|mysql|sqlite [--table NAME]",
		"Prints the DDL that creates the inbox tables (schema/postgres.sql, schema/mysql.sql, schema/sqlite.sql).", stdout)
	fs.StringVar(&table, "table", inbox.DefaultTable, "inbox `table` name")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usagef("name one database: postgres, mysql or sqlite")
	}
	var ddl string
	switch positional[0] {
	case "postgres", "postgresql":
		ddl, err = inbox.PostgresSchema(table)
	case "mysql", "mariadb":
		ddl, err = mysqlSchema(table)
	case "sqlite", "sqlite3":
		ddl, err = inbox.SQLiteSchema(table)
	default:
		return usagef("unknown database %q: use postgres, mysql or sqlite", positional[0])
	}
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, ddl)
	return err
}

func statsCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var db dbFlags
	var asJSON bool
	fs := newFlags("stats", "stats --dsn DSN [--table NAME] [--json]",
		"Prints the number of keys and the oldest key's time per consumer.", stdout)
	db.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print as JSON")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := errors.Join(noPositional(positional), db.check()); err != nil {
		return usageError{oneLine(err.Error())}
	}
	store, tenants, closeDB, err := db.open(ctx, os.Stdin)
	if err != nil {
		return err
	}
	defer closeDB()
	if tenants != nil {
		return printTenantStats(ctx, stdout, tenants, db.table, asJSON)
	}
	stats, err := store.Stats(ctx)
	if err != nil {
		return err
	}

	type consumerJSON struct {
		Consumer string    `json:"consumer"`
		Keys     int64     `json:"keys"`
		Oldest   time.Time `json:"oldest"`
	}
	out := struct {
		Table     string         `json:"table"`
		Keys      int64          `json:"keys"`
		Oldest    *time.Time     `json:"oldest"`
		Consumers []consumerJSON `json:"consumers"`
	}{Table: db.table, Consumers: []consumerJSON{}}
	for _, s := range stats {
		out.Keys += s.Keys
		oldest := s.Oldest.UTC()
		if out.Oldest == nil || oldest.Before(*out.Oldest) {
			out.Oldest = &oldest
		}
		out.Consumers = append(out.Consumers, consumerJSON{s.Consumer, s.Keys, oldest})
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	if len(stats) == 0 {
		_, err := fmt.Fprintf(stdout, "no keys in %s\n", db.table)
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CONSUMER\tKEYS\tOLDEST\tAGE")
	now := time.Now()
	for _, c := range out.Consumers {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", c.Consumer, c.Keys, c.Oldest.Format(time.RFC3339), age(now.Sub(c.Oldest)))
	}
	fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", "(all)", out.Keys, out.Oldest.Format(time.RFC3339), age(now.Sub(*out.Oldest)))
	return w.Flush()
}

// age prints a duration in days and hours, the unit retention is thought in.
func age(d time.Duration) string {
	d = d.Round(time.Minute)
	if days := d / (24 * time.Hour); days > 0 {
		return fmt.Sprintf("%dd%s", days, strings.TrimSuffix((d%(24*time.Hour)).String(), "0s"))
	}
	return strings.TrimSuffix(d.String(), "0s")
}

func forgetCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var db dbFlags
	var consumer, key, tenant string
	var dryRun bool
	fs := newFlags("forget", "forget --dsn DSN --consumer NAME --key KEY [--table NAME] [--dry-run]",
		"Deletes one key (and its attempts), so that the next delivery of its message is\n"+
			"processed again: after fixing a handler, or to release a message poisoned by\n"+
			"MaxAttempts. The consumer is the Watermill handler name unless Config.Consumer is set.\n"+
			"--dry-run says whether the key is there and deletes nothing.", stdout)
	db.register(fs)
	fs.StringVar(&consumer, "consumer", "", "the consumer the key belongs to (required)")
	fs.StringVar(&key, "key", "", "the key, as the key function derived it (required)")
	fs.StringVar(&tenant, "tenant", "", "with --tenants: the `tenant` whose key it is")
	fs.BoolVar(&dryRun, "dry-run", false, "say whether the key is there, delete nothing")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	var missing []string
	for _, f := range []struct{ name, value string }{{"--consumer", consumer}, {"--key", key}} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return usagef("%s required", strings.Join(missing, " and "))
	}
	if err := errors.Join(noPositional(positional), db.check()); err != nil {
		return usageError{oneLine(err.Error())}
	}
	switch {
	case db.tenants != "" && tenant == "":
		return usagef("--tenant is required with --tenants: the tenant whose key to forget")
	case db.tenants == "" && tenant != "":
		return usagef("--tenant needs --tenants, the list that names its DSN")
	}
	store, _, closeDB, err := db.open(ctx, os.Stdin)
	if err != nil {
		return err
	}
	defer closeDB()
	if tenant != "" {
		ctx = inbox.ContextWithTenant(ctx, tenant)
	}
	if dryRun {
		return forgetDryRun(ctx, stdout, store, consumer, key, db.table)
	}
	found, err := store.Forget(ctx, consumer, key)
	if err != nil {
		return err
	}
	if !found {
		return noKey(ctx, store, consumer, key, db.table)
	}
	_, err = fmt.Fprintf(stdout, "forgot key %q of consumer %q: its next delivery will be processed\n", key, consumer)
	return err
}

// isTerminal reports whether f is a terminal (a character device), for the progress line.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
