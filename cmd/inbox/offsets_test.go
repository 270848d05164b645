package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

func TestOffsets(t *testing.T) {
	t.Parallel()
	for _, d := range databases() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			base := []string{"--dsn", db.dsn, "--table", db.table}
			reset := func(args ...string) result {
				return inboxCLI(t, append(append([]string{"offsets", "reset", "--topic", "orders"}, args...), base...)...)
			}

			res := inboxCLI(t, append([]string{"offsets", "show"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Equal(t, "no offsets in "+db.table+"_offsets\n", res.stdout)

			// A consumer without offsets is refused, as a misspelt one would be, unless --force.
			requireOneLineError(t, reset("--consumer", "billing", "--partition", "0", "--to", "120"), exitFail,
				`--consumer "billing" has no offsets in `+db.table+`_offsets (no consumer has offsets there)`, "--force")
			res = reset("--consumer", "billing", "--partition", "0", "--to", "120", "--force", "--dry-run")
			require.Equal(t, 0, res.code, res.stderr)
			require.Equal(t, `consumer "billing" would resume topic "orders" partition 0 at offset 120 (it had no stored offset); nothing changed (--dry-run)`+"\n", res.stdout)
			require.Contains(t, res.stderr, "warning: the partition's end was not checked: pass --brokers")
			res = inboxCLI(t, append([]string{"offsets", "show"}, base...)...)
			require.Equal(t, "no offsets in "+db.table+"_offsets\n", res.stdout, "a dry run changes nothing")
			for _, p := range []string{"0", "3"} {
				res = reset("--consumer", "billing", "--partition", p, "--to", "120", "--force")
				require.Equal(t, 0, res.code, res.stderr)
				require.Contains(t, res.stdout, `consumer "billing" resumes topic "orders" partition `+p+` at offset 120 (it had no stored offset)`)
			}
			res = reset("--consumer", "billing", "--partition", "3", "--to", "7")
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, "at offset 7 (replacing its stored offset 120: records 7 to 119 will be processed again)")
			require.Empty(t, res.stderr, "no jump forward: nothing to warn about")
			res = reset("--consumer", "billing", "--partition", "3", "--to", "9", "--dry-run")
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, "would resume topic \"orders\" partition 3 at offset 9 (replacing its stored offset 7: records 7 to 8 will not be processed); nothing changed (--dry-run)")
			requireOneLineError(t, reset("--consumer", "billng", "--partition", "0", "--to", "0"), exitFail,
				`--consumer "billng" has no offsets in `+db.table+`_offsets (consumers there: billing): check the name, or pass --force`)
			res = reset("--consumer", "refunds", "--partition", "0", "--to", "0", "--force")
			require.Equal(t, 0, res.code, res.stderr)

			res = inboxCLI(t, append([]string{"offsets", "show", "--consumer", "billing"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Regexp(t, `(?s)^CONSUMER +TOPIC +PARTITION +NEXT +EPOCH +LATEST RECORD +UPDATED\n`+
				`billing +orders +0 +120 +- +- +\S+\nbilling +orders +3 +7 +- +- +\S+\n$`, res.stdout)
			requireOneLineError(t, inboxCLI(t, append([]string{"offsets", "show", "--consumer", "billng"}, base...)...), exitFail,
				`--consumer "billng" has no offsets in `+db.table+`_offsets (consumers there: billing, refunds): check the name`)

			res = inboxCLI(t, append([]string{"offsets", "show", "--json"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			var got []struct {
				Consumer    string    `json:"consumer"`
				Topic       string    `json:"topic"`
				Partition   int32     `json:"partition"`
				Next        int64     `json:"next_offset"`
				LeaderEpoch *int32    `json:"leader_epoch"`
				UpdatedAt   time.Time `json:"updated_at"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
			require.Len(t, got, 3)
			require.Equal(t, "refunds", got[2].Consumer)
			require.Equal(t, int64(0), got[2].Next)
			require.Nil(t, got[0].LeaderEpoch)
			require.WithinDuration(t, time.Now(), got[0].UpdatedAt, time.Minute)

			res = reset("--consumer", "billing", "--partition", "3", "--to", "-1", "--dry-run")
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, `would delete the offset of consumer "billing", topic "orders", partition 3 (it was 7)`)
			res = reset("--consumer", "billing", "--partition", "3", "--to", "-1")
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, `deleted the offset of consumer "billing", topic "orders", partition 3 (it was 7)`)
			requireOneLineError(t, reset("--consumer", "billing", "--partition", "3", "--to", "-1"), exitFail,
				`no stored offset for consumer "billing", topic "orders", partition 3`, "check --consumer, --topic and --partition")

			// The default --table names no table here: the error names the tables it could.
			requireOneLineError(t, inboxCLI(t, "offsets", "show", "--dsn", db.dsn, "--table", "no_such_inbox"), exitFail,
				`"no_such_inbox_offsets"`, `wrong --table? It is "no_such_inbox"`, db.table, "pass one as --table")

			for _, args := range [][]string{
				{"offsets"},
				{"offsets", "rewind"},
				{"offsets", "reset", "--topic", "orders", "--partition", "0", "--to", "1"},
				{"offsets", "reset", "--consumer", "billing", "--topic", "orders", "--to", "1"},
				{"offsets", "reset", "--consumer", "billing", "--topic", "orders", "--partition", "0"},
				{"offsets", "show", "--tenants", "-"},
			} {
				requireOneLineError(t, inboxCLI(t, append(args, base...)...), exitUsage)
			}
		})
	}
}

// With the brokers known, --to is checked against the partition: past its end is
// warned about, a topic the brokers do not have is refused (and not created by the
// question), unless --force.
func TestOffsetsResetChecksThePartition(t *testing.T) {
	t.Parallel()
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("KAFKA_BROKERS is not set: .ci/run starts the dev broker (scripts/kafka-dev.sh) and sets it")
		}
		t.Skip("Kafka not tested: set KAFKA_BROKERS (scripts/kafka-dev.sh starts the dev broker)")
	}
	db := openPostgresTable(t)
	topic := strings.ReplaceAll(db.table, "cli_", "clitopic_")
	admin, err := sarama.NewClusterAdmin(strings.Split(brokers, ","), sarama.NewConfig())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.DeleteTopic(topic); _ = admin.Close() })
	require.NoError(t, admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false))
	producer, err := sarama.NewSyncProducer(strings.Split(brokers, ","), nil)
	require.NoError(t, err)
	for range 3 {
		_, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("x")})
		require.NoError(t, err)
	}
	require.NoError(t, producer.Close())

	base := []string{"offsets", "reset", "--dsn", db.dsn, "--table", db.table, "--consumer", "billing", "--force", "--brokers", brokers}
	res := inboxCLI(t, append(base, "--topic", topic, "--partition", "0", "--to", "100000", "--dry-run")...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, "warning: --to 100000 is past the end of "+topic+"/0, whose next offset is 3: records produced at offsets 3 to 99999 would be taken for duplicates and never processed; --to 3 resumes after its last record")
	res = inboxCLI(t, append(base, "--topic", topic, "--partition", "0", "--to", "3")...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Empty(t, res.stderr, "--to at the end: nothing to warn about")

	missing := topic + "_misspelt"
	base = []string{"offsets", "reset", "--dsn", db.dsn, "--table", db.table, "--consumer", "billing", "--brokers", brokers} // no --force
	requireOneLineError(t, inboxCLI(t, append(base, "--topic", missing, "--partition", "0", "--to", "1")...), exitFail,
		"have no partition 0 of topic "+`"`+missing+`"`, "check --topic and --partition", "--force")
	requireOneLineError(t, inboxCLI(t, append(base, "--topic", topic, "--partition", "5", "--to", "1")...), exitFail,
		"have no partition 5 of topic")
	topics, err := admin.ListTopics()
	require.NoError(t, err)
	require.NotContains(t, topics, missing, "asking about a topic did not create it")
}
