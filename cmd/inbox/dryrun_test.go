package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every write has a --dry-run that says what it would change and changes nothing; a
// missing key names the flag to check.
func TestDryRuns(t *testing.T) {
	t.Parallel()
	for _, d := range databases() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			db.insert(t, "billing", 12, 40*24*time.Hour)
			db.insert(t, "refunds", 5, time.Hour)
			base := []string{"--dsn", db.dsn, "--table", db.table}

			res := inboxCLI(t, append([]string{"purge", "--older-than", "720h", "--dry-run"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Regexp(t, `^would delete 12 keys and 0 attempt rows processed before \S+ \(older than 720h0m0s\) from `+db.table+`; nothing deleted \(--dry-run\)\n$`, res.stdout)
			res = inboxCLI(t, append([]string{"purge", "--older-than", "720h", "--dry-run", "--json"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			var out struct {
				DryRun bool  `json:"dry_run"`
				Keys   int64 `json:"would_delete"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
			require.Equal(t, true, out.DryRun)
			require.EqualValues(t, 12, out.Keys)
			requireOneLineError(t, inboxCLI(t, append([]string{"purge", "--older-than", "24h", "--dry-run"}, base...)...), exitFail,
				"refusing to purge keys younger than 24h0m0s", "--force")
			require.Equal(t, 17, db.count(t), "the dry runs deleted nothing")

			res = inboxCLI(t, append([]string{"forget", "--consumer", "billing", "--key", "billing-3", "--dry-run"}, base...)...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Contains(t, res.stdout, `would forget key "billing-3" of consumer "billing" from `+db.table)
			require.Contains(t, res.stdout, "nothing deleted (--dry-run)")
			require.Equal(t, 17, db.count(t))

			// A consumer without keys while others have: the error names --consumer, and
			// the consumers next to it.
			for _, args := range [][]string{{}, {"--dry-run"}} {
				requireOneLineError(t, inboxCLI(t, append(append([]string{"forget", "--consumer", "billng", "--key", "billing-3"}, args...), base...)...), exitFail,
					`no key "billing-3" for consumer "billng"`, `--consumer "billng" has no keys there (consumers with keys next to it: billing`, "check --consumer")
			}
			requireOneLineError(t, inboxCLI(t, append([]string{"forget", "--consumer", "billing", "--key", "billing-99"}, base...)...), exitFail,
				`no key "billing-99" for consumer "billing"`, "check --key")
		})
	}
}

// A --table that names no table: the error names the tables it could.
func TestMissingTableNamesTheTablesHere(t *testing.T) {
	t.Parallel()
	db := openPostgresTable(t)
	requireOneLineError(t, inboxCLI(t, "stats", "--dsn", db.dsn, "--table", db.table+"_typo"), exitFail,
		`"`+db.table+`_typo"`, "inbox schema postgres", `wrong --table? It is "`+db.table+`_typo"`, db.table)
}
