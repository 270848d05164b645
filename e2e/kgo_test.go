package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxkgo"
	"github.com/watermill-inbox/inbox/internal/brokertest"
)

// The batch consumer loop on franz-go (inboxkgo) against the dev broker: consumer
// processes SIGKILLed between a batch's database commit and its Kafka offset commit,
// and a rebalance between two of them, in key mode and in offset mode.

const kgoHelperEnv = "INBOX_E2E_KGO_HELPER"

// kgoArgs configure a consumer process of TestKgoHelperProcess.
type kgoArgs struct {
	Brokers                           []string
	Topic, Group                      string
	InboxTable, LedgerTable, Consumer string
	Offsets                           bool
	// CrashAfter makes the process SIGKILL itself after this many batches' database
	// commits, before the last one's offset commit; 0: never.
	CrashAfter int
}

// TestKgoHelperProcess is the consumer process of the kgo tests: an inboxkgo loop whose
// handler writes one ledger row per new record (by its Watermill UUID). It prints
// "E2E committed <polled> <processed>" after each batch's database commit, before its
// offset commit, and runs until killed.
func TestKgoHelperProcess(t *testing.T) {
	raw := os.Getenv(kgoHelperEnv)
	if raw == "" {
		t.Skip("the consumer process of the kgo tests; it runs only when they re-execute the test binary")
	}
	var args kgoArgs
	require.NoError(t, json.Unmarshal([]byte(raw), &args))
	pool := brokertest.PgPool(t)
	store := brokertest.Store(t, pool, args.InboxTable, false)
	ledger := brokertest.Ledger{Pool: pool, Table: args.LedgerTable}
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: args.Consumer})
	require.NoError(t, err)

	batches := 0
	cfg := inboxkgo.Config{Inbox: ib, Consumer: args.Consumer, Offsets: args.Offsets, MaxPollRecords: 10,
		Handle: func(ctx context.Context, records []*kgo.Record) error {
			for _, r := range records {
				item, err := inboxkgo.WatermillUUID(r)
				if err != nil {
					return err
				}
				if err := ledger.Apply(ctx, "kgo", item.Key); err != nil {
					return err
				}
			}
			return nil
		},
		Committed: func(records []*kgo.Record, res inbox.BatchResult) {
			fmt.Printf("E2E committed %d %d\n", len(records), res.Processed)
			if batches++; args.CrashAfter > 0 && batches >= args.CrashAfter {
				fmt.Printf("E2E crashing -\n")
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		},
	}
	if !args.Offsets {
		cfg.Key = inboxkgo.WatermillUUID
	}
	c, err := inboxkgo.New(cfg)
	require.NoError(t, err)
	cl, err := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers(args.Brokers...), kgo.ConsumerGroup(args.Group), kgo.ConsumeTopics(args.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.FetchMaxWait(50*time.Millisecond))...)
	require.NoError(t, err)
	defer cl.Close()
	fmt.Println("E2E running -")
	for {
		if err := c.Run(context.Background(), cl); err != nil {
			fmt.Fprintf(os.Stderr, "batch failed, retrying: %v\n", err)
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// skipped sums, over a process's batches, the records polled but not processed.
func skipped(c *child) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.lines {
		if rest, ok := strings.CutPrefix(l, "committed "); ok {
			var polled, processed int
			if _, err := fmt.Sscan(rest, &polled, &processed); err == nil {
				n += polled - processed
			}
		}
	}
	return n
}

// Consumer processes that kill themselves between a batch's database commit and its
// offset commit, three in a row, then one that finishes: every record applied exactly
// once. In key mode Kafka delivers each killed batch again and the inbox skips it; in
// offset mode the next process seeks to the offsets in the database and is not even
// given it.
func TestKgoCrashBetweenDatabaseAndOffsetCommit(t *testing.T) {
	t.Parallel()
	for _, offsets := range []bool{false, true} {
		name := "keys"
		if offsets {
			name = "offsets"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			brokers := brokertest.KafkaBrokers(t)
			s := newSetup(t)
			topic, group := brokertest.Name("kgocrash"), brokertest.Name("group")
			brokertest.CreateTopic(t, brokers, topic, 2)
			pub := kafkaPublisher(t, brokers)
			const n = 60
			for range n {
				require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("credit"))))
			}
			args := kgoArgs{Brokers: brokers, Topic: topic, Group: group, InboxTable: s.inboxTable, LedgerTable: s.ledgerTable,
				Consumer: "ledger", Offsets: offsets, CrashAfter: 2}
			dups := 0
			for range 3 {
				c := startHelper(t, "TestKgoHelperProcess", kgoHelperEnv, args)
				c.waitFor(t, "crashing", 1)
				<-c.exited
				dups += skipped(c)
				rows, distinct := s.ledger.Counts(t)
				require.Equal(t, rows, distinct, "no record applied twice")
			}
			args.CrashAfter = 0
			last := startHelper(t, "TestKgoHelperProcess", kgoHelperEnv, args)
			require.Eventually(t, func() bool {
				_, distinct := s.ledger.Counts(t)
				return distinct == n
			}, wait, 20*time.Millisecond)
			last.kill(t)
			dups += skipped(last)
			rows, distinct := s.ledger.Counts(t)
			require.Equal(t, n, distinct, "none lost")
			require.Equal(t, n, rows, "none applied twice")
			if offsets {
				require.Zero(t, dups, "each process resumed at the offsets in the database: no batch came twice")
				require.Equal(t, logEnds(t, brokers, topic), storedNext(t, s.offsetInbox(t, "ledger", nil), "ledger"))
			} else {
				require.GreaterOrEqual(t, dups, 3, "each killed batch came again and was skipped")
				require.Len(t, brokertest.Keys(t, s.pool, s.inboxTable, "ledger"), n)
			}
			t.Logf("%s: %d records, 3 processes killed between the commits, %d redelivered records skipped", name, n, dups)
		})
	}
}

// Two offset-mode consumer processes in one group while records flow: the second joins
// (a rebalance), the first is SIGKILLed: every record applied once, and the offsets in
// the database end at the log's ends.
func TestKgoOffsetsRebalanceBetweenProcesses(t *testing.T) {
	t.Parallel()
	f := startKafkaFlow(t, "kgorebalance")
	args := kgoArgs{Brokers: f.brokers, Topic: f.topic, Group: f.group, InboxTable: f.s.inboxTable, LedgerTable: f.s.ledgerTable, Consumer: "ledger", Offsets: true}
	a := startHelper(t, "TestKgoHelperProcess", kgoHelperEnv, args)
	a.waitFor(t, "committed", 3)
	b := startHelper(t, "TestKgoHelperProcess", kgoHelperEnv, args)
	b.waitFor(t, "committed", 3) // B got partitions: the group rebalanced
	a.waitFor(t, "committed", a.count("committed")+2)
	a.kill(t)
	b.waitFor(t, "committed", b.count("committed")+5) // B took over A's partitions
	want := f.stopPublishing(t)

	f.awaitApplied(t, want)
	b.kill(t)
	f.requireAppliedOnce(t, want)
	require.Equal(t, logEnds(t, f.brokers, f.topic), storedNext(t, f.s.offsetInbox(t, "ledger", nil), "ledger"))
	t.Logf("%d records; A committed %d batches, B %d; B skipped %d records", want, a.count("committed"), b.count("committed"), skipped(b))
}
