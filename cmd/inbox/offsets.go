package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/watermill-inbox/inbox"
)

// offsetsCmd shows and resets the offsets of offset mode (<table>_offsets).
func offsetsCmd(ctx context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 0 {
		return usagef("name a subcommand: show or reset")
	}
	switch args[0] {
	case "show":
		return offsetsShowCmd(ctx, args[1:], stdout)
	case "reset":
		return offsetsResetCmd(ctx, args[1:], stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, "Usage:\n  inbox offsets show  --dsn DSN [--consumer NAME] [--table inbox] [--json]\n"+
			"  inbox offsets reset --dsn DSN --consumer NAME --topic TOPIC --partition N --to OFFSET [--table inbox]\n\n"+
			"The offsets of offset mode: per consumer, topic and partition, the offset of the next\n"+
			"record to process (records below it are duplicates). Run \"inbox offsets show --help\".\n")
		return errHelp
	}
	return usagef("unknown subcommand %q: use show or reset", args[0])
}

// offsetStore opens the database and returns its store's offsets.
func offsetStore(ctx context.Context, db dbFlags) (inbox.OffsetStore, func(), error) {
	store, closeDB, err := openStore(ctx, db.dsn, db.table)
	if err != nil {
		return nil, nil, err
	}
	offsets, ok := store.(inbox.OffsetStore)
	if !ok {
		closeDB()
		return nil, nil, errors.New("this store keeps no offsets: offset mode runs on PostgreSQL, MySQL (not Vitess) and SQLite")
	}
	if err := offsets.VerifyOffsets(ctx); err != nil {
		closeDB()
		return nil, nil, err
	}
	return offsets, closeDB, nil
}

func offsetsShowCmd(ctx context.Context, args []string, stdout io.Writer) error {
	var db dbFlags
	var consumer string
	var asJSON bool
	fs := newFlags("offsets show", "offsets show --dsn DSN [--consumer NAME] [--table NAME] [--json]",
		"Prints the stored offsets of offset mode: per consumer, topic and partition, the next\n"+
			"record to process, the leader epoch and time of the last one, and when it was stored.", stdout)
	db.register(fs)
	fs.StringVar(&consumer, "consumer", "", "show this consumer's offsets only")
	fs.BoolVar(&asJSON, "json", false, "print as JSON")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := errors.Join(noPositional(positional), db.check()); err != nil {
		return usageError{oneLine(err.Error())}
	}
	store, closeDB, err := offsetStore(ctx, db)
	if err != nil {
		return err
	}
	defer closeDB()
	offsets, err := store.Offsets(ctx, consumer)
	if err != nil {
		return err
	}
	if asJSON {
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

func offsetsResetCmd(ctx context.Context, args []string, stdout io.Writer) error {
	var db dbFlags
	var consumer, topic string
	var partition, to int64
	fs := newFlags("offsets reset", "offsets reset --dsn DSN --consumer NAME --topic TOPIC --partition N --to OFFSET [--table NAME]",
		"Sets where a consumer in offset mode resumes in one partition: records from --to on are\n"+
			"new, records below it duplicates. Use it after the inbox refused records with\n"+
			"ErrOffsetRewound (a topic re-created, a log truncated or restored, offsets reset), or to\n"+
			"process records again on purpose. --to -1 deletes the partition's row: the next record\n"+
			"delivered is new whatever its offset. The change waits for a transaction that holds\n"+
			"the row (a consumer processing that partition).", stdout)
	db.register(fs)
	fs.StringVar(&consumer, "consumer", "", "the consumer (required)")
	fs.StringVar(&topic, "topic", "", "the topic (required)")
	fs.Int64Var(&partition, "partition", -1, "the partition (required)")
	fs.Int64Var(&to, "to", -2, "the offset of the next record to process, or -1 to delete the row (required)")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case consumer == "" || topic == "":
		return usagef("--consumer and --topic are required")
	case partition < 0 || partition > 1<<31-1:
		return usagef("--partition is required: the partition number, 0 or more")
	case to < -1:
		return usagef("--to is required: the offset of the next record to process, or -1 to delete the row")
	}
	if err := errors.Join(noPositional(positional), db.check()); err != nil {
		return usageError{oneLine(err.Error())}
	}
	store, closeDB, err := offsetStore(ctx, db)
	if err != nil {
		return err
	}
	defer closeDB()
	found, err := store.SetOffset(ctx, consumer, topic, int32(partition), to)
	if err != nil {
		return err
	}
	was := "it had no stored offset"
	if found {
		was = "replacing its stored offset"
	}
	if to < 0 {
		if !found {
			return fmt.Errorf("no stored offset for consumer %q, topic %q, partition %d in %s_offsets", consumer, topic, partition, db.table)
		}
		_, err = fmt.Fprintf(stdout, "deleted the offset of consumer %q, topic %q, partition %d: the next record delivered is new\n", consumer, topic, partition)
		return err
	}
	_, err = fmt.Fprintf(stdout, "consumer %q resumes topic %q partition %d at offset %d (%s)\n", consumer, topic, partition, to, was)
	return err
}
