package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/watermill-inbox/inbox"
)

// offsetsCmd shows and resets the offsets of offset mode (<table>_offsets).
func offsetsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("name a subcommand: show or reset")
	}
	switch args[0] {
	case "show":
		return offsetsShowCmd(ctx, args[1:], stdout)
	case "reset":
		return offsetsResetCmd(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, "Usage:\n  inbox offsets show  --dsn DSN [--consumer NAME] [--table inbox] [--json]\n"+
			"  inbox offsets reset --dsn DSN --consumer NAME --topic TOPIC --partition N --to OFFSET [--table inbox] [--brokers B] [--dry-run] [--force]\n\n"+
			"The offsets of offset mode: per consumer, topic and partition, the offset of the next\n"+
			"record to process (records below it are duplicates). They are in <table>_offsets,\n"+
			"beside the inbox table --table names. Run \"inbox offsets show --help\".\n")
		return errHelp
	}
	return usagef("unknown subcommand %q: use show or reset", args[0])
}

// offsetStore opens the database and returns its store's offsets, checking the offsets
// table only (offset mode may run on a database where the key tables are elsewhere).
func offsetStore(ctx context.Context, db dbFlags) (inbox.OffsetStore, func(), error) {
	store, closeDB, err := connectStore(ctx, db.dsn, db.table, db.schema)
	if err != nil {
		return nil, nil, err
	}
	offsets, ok := store.(inbox.OffsetStore)
	if !ok {
		closeDB()
		return nil, nil, errors.New("this store keeps no offsets: offset mode runs on PostgreSQL, MySQL, MariaDB, TiDB (not Vitess) and SQLite")
	}
	verifyCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := offsets.VerifyOffsets(verifyCtx); err != nil {
		closeDB()
		return nil, nil, tableHint(ctx, db.dsn, db.schema, db.table, "_offsets", err)
	}
	return offsets, closeDB, nil
}

// consumersOf returns the consumers that have offsets, sorted.
func consumersOf(all []inbox.PartitionOffset) []string {
	var names []string
	for _, o := range all {
		if !slices.Contains(names, o.Consumer) {
			names = append(names, o.Consumer)
		}
	}
	slices.Sort(names)
	return names
}

// unknownConsumer says that consumer has no offsets, and which consumers have.
func unknownConsumer(consumer, table string, all []inbox.PartitionOffset) string {
	known := consumersOf(all)
	there := "no consumer has offsets there"
	if len(known) > 0 {
		there = "consumers there: " + strings.Join(known, ", ")
	}
	return fmt.Sprintf("--consumer %q has no offsets in %s_offsets (%s)", consumer, table, there)
}

func offsetsShowCmd(ctx context.Context, args []string, stdout io.Writer) error {
	var db dbFlags
	var consumer string
	var asJSON bool
	fs := newFlags("offsets show", "offsets show --dsn DSN [--consumer NAME] [--table NAME] [--json]",
		"Prints the stored offsets of offset mode: per consumer, topic and partition, the next\n"+
			"record to process, the leader epoch and time of the last one, and when it was stored.\n"+
			"They are in <table>_offsets: --table names the inbox table of the store the consumer\n"+
			"runs on (inbox.PostgresConfig.Table...).", stdout)
	db.register(fs)
	fs.StringVar(&consumer, "consumer", "", "show this consumer's offsets only")
	fs.BoolVar(&asJSON, "json", false, "print as JSON")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := errors.Join(noPositional(positional), db.check(), db.noTenants()); err != nil {
		return usageError{oneLine(err.Error())}
	}
	store, closeDB, err := offsetStore(ctx, db)
	if err != nil {
		return err
	}
	defer closeDB()
	all, err := store.Offsets(ctx, "")
	if err != nil {
		return err
	}
	offsets := all
	if consumer != "" {
		offsets = slices.DeleteFunc(slices.Clone(all), func(o inbox.PartitionOffset) bool { return o.Consumer != consumer })
		if len(offsets) == 0 {
			return errors.New(unknownConsumer(consumer, db.table, all) + ": check the name")
		}
	}
	if asJSON {
		return printOffsetsJSON(stdout, offsets)
	}
	if len(offsets) == 0 {
		_, err := fmt.Fprintf(stdout, "no offsets in %s_offsets\n", db.table)
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CONSUMER\tTOPIC\tPARTITION\tNEXT\tEPOCH\tLATEST RECORD\tUPDATED")
	for _, o := range offsets {
		epoch, latest := "-", "-"
		if o.LeaderEpoch >= 0 {
			epoch = strconv.Itoa(int(o.LeaderEpoch))
		}
		if !o.MaxTimestamp.IsZero() {
			latest = o.MaxTimestamp.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", o.Consumer, o.Topic, o.Partition, o.Next, epoch, latest, o.UpdatedAt.UTC().Format(time.RFC3339))
	}
	return w.Flush()
}

func printOffsetsJSON(stdout io.Writer, offsets []inbox.PartitionOffset) error {
	type offsetJSON struct {
		Consumer     string     `json:"consumer"`
		Topic        string     `json:"topic"`
		Partition    int32      `json:"partition"`
		Next         int64      `json:"next_offset"`
		LeaderEpoch  *int32     `json:"leader_epoch"`
		MaxTimestamp *time.Time `json:"max_timestamp"`
		TopicID      *string    `json:"topic_id"`
		UpdatedAt    time.Time  `json:"updated_at"`
	}
	out := []offsetJSON{}
	for _, o := range offsets {
		j := offsetJSON{Consumer: o.Consumer, Topic: o.Topic, Partition: o.Partition, Next: o.Next, UpdatedAt: o.UpdatedAt.UTC()}
		if o.LeaderEpoch >= 0 {
			j.LeaderEpoch = &o.LeaderEpoch
		}
		if !o.MaxTimestamp.IsZero() {
			j.MaxTimestamp = &o.MaxTimestamp
		}
		if o.TopicID != nil {
			id := hex.EncodeToString(o.TopicID)
			j.TopicID = &id
		}
		out = append(out, j)
	}
	return json.NewEncoder(stdout).Encode(out)
}

func offsetsResetCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var db dbFlags
	var consumer, topic, brokers string
	var partition, to int64
	var force, dryRun bool
	fs := newFlags("offsets reset", "offsets reset --dsn DSN --consumer NAME --topic TOPIC --partition N --to OFFSET [--table NAME] [--brokers B] [--dry-run] [--force]",
		"Sets where a consumer in offset mode resumes in one partition: records from --to on are\n"+
			"new, records below it duplicates. Use it after the inbox refused records with\n"+
			"ErrOffsetRewound (a topic re-created, a log truncated or restored, offsets reset), to\n"+
			"skip a record (--to its offset + 1), or to process records again on purpose. --to -1\n"+
			"deletes the partition's row: the next record delivered is new whatever its offset.\n"+
			"The change waits for a transaction that holds the row (a consumer processing that\n"+
			"partition). A consumer with no offsets yet is refused (a misspelt --consumer), unless\n"+
			"--force; with --brokers (or $KAFKA_BROKERS) --to is checked against the partition's\n"+
			"end, and a topic or partition the brokers do not have is refused, unless --force.\n"+
			"--dry-run says what would change and changes nothing.", stdout)
	db.register(fs)
	fs.StringVar(&consumer, "consumer", "", "the consumer (required)")
	fs.StringVar(&topic, "topic", "", "the topic (required)")
	fs.Int64Var(&partition, "partition", -1, "the partition (required)")
	fs.Int64Var(&to, "to", -2, "the offset of the next record to process, or -1 to delete the row (required)")
	fs.StringVar(&brokers, "brokers", os.Getenv("KAFKA_BROKERS"), "Kafka `brokers` (host:port,...) to check --to against the partition's end (default $KAFKA_BROKERS)")
	fs.BoolVar(&force, "force", false, "reset even for a consumer without offsets, or a topic or partition the brokers do not have")
	fs.BoolVar(&dryRun, "dry-run", false, "say what would change, change nothing")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	var missing []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"--consumer", consumer != ""}, {"--topic", topic != ""}, {"--partition", partition >= 0}, {"--to", to >= -1}} {
		if !f.set {
			missing = append(missing, f.name)
		}
	}
	switch {
	case len(missing) > 0:
		return usagef("%s required: --partition is the partition number (0 or more), --to the offset of the next record to process (or -1 to delete the row)", strings.Join(missing, ", "))
	case partition > 1<<31-1:
		return usagef("--partition %d is not a partition number: use 0 to 2147483647", partition)
	}
	if err := errors.Join(noPositional(positional), db.check(), db.noTenants()); err != nil {
		return usageError{oneLine(err.Error())}
	}
	store, closeDB, err := offsetStore(ctx, db)
	if err != nil {
		return err
	}
	defer closeDB()
	all, err := store.Offsets(ctx, "")
	if err != nil {
		return err
	}
	plan := resetPlan{consumer: consumer, topic: topic, partition: int32(partition), to: to, table: db.table}
	for _, o := range all {
		if o.Consumer == consumer {
			plan.known = true
			if o.Topic == topic && o.Partition == plan.partition {
				plan.current = &o
			}
		}
	}
	switch {
	case to < 0 && plan.current == nil:
		msg := fmt.Sprintf("no stored offset for consumer %q, topic %q, partition %d in %s_offsets, nothing to delete: check --consumer, --topic and --partition", consumer, topic, partition, db.table)
		if !plan.known {
			msg = unknownConsumer(consumer, db.table, all) + ", nothing to delete: check the name"
		}
		return errors.New(msg)
	case !plan.known && !force:
		return errors.New(unknownConsumer(consumer, db.table, all) + ": check the name, or pass --force to store an offset for a consumer that has none yet")
	}
	if to >= 0 {
		if err := plan.checkPartition(ctx, brokers, force, stderr); err != nil {
			return err
		}
	}
	if dryRun {
		_, err := fmt.Fprintf(stdout, "%s; nothing changed (--dry-run)\n", plan.describe(true))
		return err
	}
	if _, err := store.SetOffset(ctx, consumer, topic, int32(partition), to); err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, plan.describe(false))
	return err
}

// resetPlan is what an offsets reset changes.
type resetPlan struct {
	consumer, topic string
	partition       int32
	to              int64
	table           string
	known           bool                   // the consumer has offsets
	current         *inbox.PartitionOffset // the partition's row, nil when it has none
}

// describe says what the reset does (would do, with dry).
func (p resetPlan) describe(dry bool) string {
	verb := map[bool][2]string{false: {"resumes", "deleted"}, true: {"would resume", "would delete"}}[dry]
	if p.to < 0 {
		return fmt.Sprintf("%s the offset of consumer %q, topic %q, partition %d (it was %d): the next record delivered is new", verb[1], p.consumer, p.topic, p.partition, p.current.Next)
	}
	was := "it had no stored offset"
	switch {
	case p.current == nil:
	case p.current.Next < p.to:
		was = fmt.Sprintf("replacing its stored offset %d: records %d to %d will not be processed", p.current.Next, p.current.Next, p.to-1)
	case p.current.Next > p.to:
		was = fmt.Sprintf("replacing its stored offset %d: records %d to %d will be processed again", p.current.Next, p.to, p.current.Next-1)
	default:
		was = "its stored offset already"
	}
	return fmt.Sprintf("consumer %q %s topic %q partition %d at offset %d (%s)", p.consumer, verb[0], p.topic, p.partition, p.to, was)
}

// noTenants refuses --tenants: offsets are per database, reset one at a time.
func (d *dbFlags) noTenants() error {
	if d.tenants != "" {
		return usagef("--tenants does not apply to offsets: name one database with --dsn (and --schema)")
	}
	return nil
}
