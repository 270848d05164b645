package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOffsets(t *testing.T) {
	t.Parallel()
	for _, d := range databases() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			base := []string{"--dsn", db.dsn, "--table", db.table}

			res := inboxCLI(t, append([]string{"offsets", "show"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Equal(t, "no offsets in "+db.table+"_offsets\n", res.stdout)

			for _, p := range []string{"0", "3"} {
				res = inboxCLI(t, append([]string{"offsets", "reset", "--consumer", "billing", "--topic", "orders", "--partition", p, "--to", "120"}, base...)...)
				require.Equal(t, 0, res.code, res.stderr)
				require.Contains(t, res.stdout, `consumer "billing" resumes topic "orders" partition `+p+` at offset 120 (it had no stored offset)`)
			}
			res = inboxCLI(t, append([]string{"offsets", "reset", "--consumer", "billing", "--topic", "orders", "--partition", "3", "--to", "7"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, "at offset 7 (replacing its stored offset)")
			res = inboxCLI(t, append([]string{"offsets", "reset", "--consumer", "refunds", "--topic", "orders", "--partition", "0", "--to", "0"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)

			res = inboxCLI(t, append([]string{"offsets", "show", "--consumer", "billing"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Regexp(t, `(?s)^CONSUMER +TOPIC +PARTITION +NEXT +EPOCH +LATEST RECORD +UPDATED\n`+
				`billing +orders +0 +120 +- +- +\S+\nbilling +orders +3 +7 +- +- +\S+\n$`, res.stdout)

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

			res = inboxCLI(t, append([]string{"offsets", "reset", "--consumer", "billing", "--topic", "orders", "--partition", "3", "--to", "-1"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, "deleted the offset of consumer \"billing\", topic \"orders\", partition 3")
			requireOneLineError(t, inboxCLI(t, append([]string{"offsets", "reset", "--consumer", "billing", "--topic", "orders", "--partition", "3", "--to", "-1"}, base...)...),
				exitFail, "no stored offset for consumer \"billing\"")

			for _, args := range [][]string{
				{"offsets"},
				{"offsets", "rewind"},
				{"offsets", "reset", "--topic", "orders", "--partition", "0", "--to", "1"},
				{"offsets", "reset", "--consumer", "billing", "--topic", "orders", "--to", "1"},
				{"offsets", "reset", "--consumer", "billing", "--topic", "orders", "--partition", "0"},
			} {
				requireOneLineError(t, inboxCLI(t, append(args, base...)...), exitUsage)
			}
		})
	}
}
