package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// failoverVerdict judges a failover run (TestPostgresFailover): before is the ledger of
// the dead primary's data folder, recovered on its own; after is the new primary's;
// report and exitCode are the harness's. It returns the messages lost in the failover
// (those whose key the dead primary committed and the new one lacks, in order) and
// everything that is wrong:
//
//   - the dead primary holds exactly one ledger entry per key (key and effect are one
//     transaction), and a lost key names a message of the run;
//   - on the new primary every message not lost is applied exactly once with its amount,
//     the balances are theirs, one key each, and a lost message has no entry: the
//     messages never applied are exactly the lost ones, no other;
//   - the harness says the same: OK (exit 0) when nothing was lost, else (exit 1) the
//     check of this same ledger with nothing before it, so every delivery was handled
//     before its deadline;
//   - with synchronous replication nothing is lost.
func failoverVerdict(o options, before, after ledgerState, report string, exitCode int, sync bool) (lost []int, problems []string) {
	wrong := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	entries := map[string]int{}
	for _, e := range before.entries {
		entries[e.key]++
	}
	for _, k := range before.keys {
		if entries[k] != 1 {
			wrong("the dead primary holds %d ledger entries for key %s, not 1", entries[k], k)
		}
	}
	if len(before.entries) != len(before.keys) {
		wrong("the dead primary holds %d ledger entries for %d keys", len(before.entries), len(before.keys))
	}

	has := map[string]bool{}
	for _, k := range after.keys {
		has[k] = true
	}
	lostKeys := map[string]bool{}
	for _, k := range before.keys {
		if !has[k] {
			lostKeys[k] = true
		}
	}
	var survived []int
	for i := range o.messages {
		if key := "m" + strconv.Itoa(i); lostKeys[key] {
			lost = append(lost, i)
			delete(lostKeys, key)
		} else {
			survived = append(survived, i)
		}
	}
	for k := range lostKeys {
		wrong("key %s, lost in the failover, names no message of the run", k)
	}

	for _, p := range checkMessages(o, after, survived) {
		wrong("new primary, messages not lost in the failover: %s", p)
	}
	applied := map[string]bool{}
	for _, e := range after.entries {
		applied[e.key] = true
	}
	var never []int
	for i := range o.messages {
		if !applied["m"+strconv.Itoa(i)] {
			never = append(never, i)
		}
	}
	if !slices.Equal(lost, never) {
		wrong("messages never applied %v, lost in the failover %v: they must be the same", never, lost)
	}

	switch {
	case len(lost) == 0 && exitCode != 0:
		wrong("nothing was lost in the failover, yet the harness exited %d", exitCode)
	case len(lost) == 0 && !strings.Contains(report, "OK: every message applied exactly once\n"):
		wrong("nothing was lost in the failover, yet the harness did not report OK")
	case len(lost) > 0 && exitCode != 1:
		wrong("%d messages lost in the failover, yet the harness exited %d", len(lost), exitCode)
	case len(lost) > 0:
		verdict := check(o, after)
		if len(verdict) == 0 || verdict[0] != tally(len(lost), 0, 0) {
			wrong("the check of the new primary's ledger does not start with %q: %q", tally(len(lost), 0, 0), verdict)
		} else if !strings.Contains(report, "FAIL:\n  "+strings.Join(verdict, "\n  ")+"\n") {
			wrong("the harness's report is not the check of the new primary's ledger alone:\n%s", strings.Join(verdict, "\n"))
		}
	}
	if sync && len(lost) > 0 {
		wrong("synchronous replication lost %d acked messages: %v", len(lost), lost)
	}
	return lost, problems
}

// TestFailoverVerdict feeds failoverVerdict made-up ledgers: an async failover that lost
// acked messages passes only when the lost keys and the never-applied messages are the
// same and the harness said so; any other gap, a double, a wrong amount or a sync loss
// fails.
func TestFailoverVerdict(t *testing.T) {
	o := options{messages: 6, accounts: 2, mode: "keys"}
	// ledger builds a ledger holding messages ms, each once with its amount.
	ledger := func(ms ...int) ledgerState {
		s := ledgerState{balances: map[int]int64{}}
		for _, i := range ms {
			key := "m" + strconv.Itoa(i)
			s.entries = append(s.entries, entry{key, i % o.accounts, i + 1})
			s.keys = append(s.keys, key)
			s.balances[i%o.accounts] += int64(i + 1)
		}
		return s
	}
	harness := func(after ledgerState) (string, int) {
		if problems := check(o, after); len(problems) > 0 {
			return "  ledger ...\nFAIL:\n  " + strings.Join(problems, "\n  ") + "\n", 1
		}
		return "  ledger ...\nOK: every message applied exactly once\n", 0
	}

	t.Run("nothing lost", func(t *testing.T) {
		after := ledger(0, 1, 2, 3, 4, 5)
		report, code := harness(after)
		lost, problems := failoverVerdict(o, ledger(0, 1, 3), after, report, code, true)
		require.Empty(t, problems)
		require.Empty(t, lost)
	})
	t.Run("acked messages lost with their keys", func(t *testing.T) {
		after := ledger(0, 2, 3, 5)
		report, code := harness(after)
		lost, problems := failoverVerdict(o, ledger(0, 1, 2, 4), after, report, code, false)
		require.Empty(t, problems)
		require.Equal(t, []int{1, 4}, lost)
	})
	t.Run("a message missing that the old primary never committed", func(t *testing.T) {
		after := ledger(0, 2, 3)
		report, code := harness(after)
		_, problems := failoverVerdict(o, ledger(0, 1, 2, 4), after, report, code, false)
		require.Contains(t, strings.Join(problems, "\n"), "messages never applied [1 4 5], lost in the failover [1 4]")
	})
	t.Run("a message applied twice beside a loss", func(t *testing.T) {
		after := ledger(0, 2, 3, 5)
		after.entries = append(after.entries, entry{"m3", 1, 4})
		after.balances[1] += 4
		report, code := harness(after)
		_, problems := failoverVerdict(o, ledger(0, 1, 2), after, report, code, false)
		require.Contains(t, strings.Join(problems, "\n"), "message m3 was applied 2 times")
	})
	t.Run("a wrong balance beside a loss", func(t *testing.T) {
		after := ledger(0, 2, 3, 5)
		after.balances[0] += 7
		report, code := harness(after)
		_, problems := failoverVerdict(o, ledger(1), after, report, code, false)
		require.Contains(t, strings.Join(problems, "\n"), "account 0 has balance")
	})
	t.Run("an effect on the old primary without its key", func(t *testing.T) {
		after := ledger(0, 1, 2, 3, 4, 5)
		report, code := harness(after)
		before := ledger(0, 1)
		before.entries = append(before.entries, entry{"m2", 0, 3})
		_, problems := failoverVerdict(o, before, after, report, code, false)
		require.Contains(t, strings.Join(problems, "\n"), "the dead primary holds 3 ledger entries for 2 keys")
	})
	t.Run("the harness did not finish its deliveries", func(t *testing.T) {
		after := ledger(0, 2, 3, 4, 5)
		report := "FAIL:\n  1 of 12 deliveries not handled (-duration 2m30s passed, or interrupted)\n  " + strings.Join(check(o, after), "\n  ") + "\n"
		_, problems := failoverVerdict(o, ledger(1), after, report, 1, false)
		require.Contains(t, strings.Join(problems, "\n"), "the harness's report is not the check of the new primary's ledger alone")
	})
	t.Run("the harness said OK over a loss", func(t *testing.T) {
		after := ledger(0, 2, 3, 4, 5)
		_, problems := failoverVerdict(o, ledger(1), after, "OK: every message applied exactly once\n", 0, false)
		require.Contains(t, strings.Join(problems, "\n"), "1 messages lost in the failover, yet the harness exited 0")
	})
	t.Run("sync loses nothing", func(t *testing.T) {
		after := ledger(0, 2, 3, 4, 5)
		report, code := harness(after)
		_, problems := failoverVerdict(o, ledger(1), after, report, code, true)
		require.Contains(t, strings.Join(problems, "\n"), "synchronous replication lost 1 acked messages: [1]")
	})
}
