package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// errNoPartition means the brokers have no such topic or partition.
var errNoPartition = errors.New("no such topic or partition")

// partitionBounds asks the brokers for a partition's first kept offset and its end (the
// offset of the next record produced).
func partitionBounds(ctx context.Context, brokers, topic string, partition int32) (start, end int64, err error) {
	cfg := sarama.NewConfig()
	cfg.Net.DialTimeout, cfg.Net.ReadTimeout, cfg.Net.WriteTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	cfg.Metadata.Retry.Max = 1
	cfg.Metadata.Full = false
	cfg.Metadata.AllowAutoTopicCreation = false // asking about a misspelt topic must not create it
	type result struct {
		start, end int64
		err        error
	}
	done := make(chan result, 1)
	go func() { // sarama takes no context
		client, err := sarama.NewClient(strings.Split(brokers, ","), cfg)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer client.Close()
		parts, err := client.Partitions(topic)
		switch {
		case errors.Is(err, sarama.ErrUnknownTopicOrPartition), err == nil && !slices.Contains(parts, partition):
			done <- result{err: errNoPartition}
			return
		case err != nil:
			done <- result{err: err}
			return
		}
		var r result
		if r.start, r.err = client.GetOffset(topic, partition, sarama.OffsetOldest); r.err == nil {
			r.end, r.err = client.GetOffset(topic, partition, sarama.OffsetNewest)
		}
		done <- r
	}()
	select {
	case r := <-done:
		return r.start, r.end, r.err
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
}

// warn prints a warning of the offsets reset on stderr.
func warn(stderr io.Writer, format string, args ...any) {
	fmt.Fprintf(stderr, "inbox offsets reset: warning: "+format+"\n", args...)
}

// checkPartition checks --to against the partition's bounds on the brokers, when they
// are known: past the end and below the log's start are warned about; a topic or
// partition the brokers do not have is refused, unless force.
func (p *resetPlan) checkPartition(ctx context.Context, brokers string, force bool, stderr io.Writer) error {
	if brokers == "" {
		if p.current == nil || p.to > p.current.Next {
			warn(stderr, "the partition's end was not checked: pass --brokers (or set KAFKA_BROKERS) to check that --to %d is not past it", p.to)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	start, end, err := partitionBounds(ctx, brokers, p.topic, p.partition)
	switch {
	case errors.Is(err, errNoPartition) && !force:
		return fmt.Errorf("the brokers at %s have no partition %d of topic %q: check --topic and --partition (or --brokers), or pass --force to reset it anyway", brokers, p.partition, p.topic)
	case errors.Is(err, errNoPartition):
		warn(stderr, "the brokers at %s have no partition %d of topic %q", brokers, p.partition, p.topic)
	case err != nil:
		warn(stderr, "could not check --to against the partition's end on the brokers at %s: %v", brokers, err)
	case p.to > end:
		warn(stderr, "--to %d is past the end of %s/%d, whose next offset is %d: records produced at offsets %d to %d would be taken for duplicates and never processed; --to %d resumes after its last record",
			p.to, p.topic, p.partition, end, end, p.to-1, end)
	case p.to < start:
		warn(stderr, "--to %d is below %d, the first offset %s/%d keeps (retention deleted the older records): the consumer resumes at %d", p.to, start, p.topic, p.partition, start)
	}
	return nil
}
