package main

import (
	"context"
	"fmt"
	"strconv"
)

// The ledger checks: what the databases committed against what exactly-once means.

// check compares the ledger with what exactly-once means, message by message.
func check(o options, s ledgerState) []string {
	var all []int
	for i := range o.messages {
		if o.poisonKind(i) == "" { // a poison message must never be applied: its entry would be unknown
			all = append(all, i)
		}
	}
	return checkMessages(o, s, all)
}

// checkTenants checks each tenant's ledger against its own messages: one applied in
// another tenant's database is missing in its own and unknown in the other.
func checkTenants(ctx context.Context, o options, t *tenants) ([]string, error) {
	states, err := t.tenantLedgers(ctx)
	if err != nil {
		return nil, err
	}
	var problems []string
	for n, s := range states {
		var mine []int
		for i := n; i < o.messages; i += o.tenants {
			mine = append(mine, i)
		}
		for _, p := range checkMessages(o, s, mine) {
			problems = append(problems, "tenant "+tenantName(n)+": "+p)
		}
	}
	return problems, nil
}

// checkMessages compares a ledger with what exactly-once means for the messages it
// should hold, message by message.
func checkMessages(o options, s ledgerState, messages []int) []string {
	var problems []string
	type seen struct{ n, account, amount int }
	byKey := map[string]*seen{}
	for _, e := range s.entries {
		k := byKey[e.key]
		if k == nil {
			k = &seen{}
			byKey[e.key] = k
		}
		k.n++
		k.account, k.amount = e.account, e.amount
	}
	lost, twice, wrong := 0, 0, 0
	report := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	for _, i := range messages {
		key := "m" + strconv.Itoa(i)
		k := byKey[key]
		delete(byKey, key)
		switch {
		case k == nil:
			lost++
			report("message %s was never applied", key)
		case k.n > 1:
			twice++
			report("message %s was applied %d times", key, k.n)
		case k.account != i%o.accounts || k.amount != i+1:
			wrong++
			report("message %s credited %d to account %d, not %d to %d", key, k.amount, k.account, i+1, i%o.accounts)
		}
	}
	for key := range byKey {
		report("ledger entry for an unknown message %q", key)
	}
	want := map[int]int64{}
	for _, i := range messages {
		want[i%o.accounts] += int64(i + 1)
	}
	for a := range o.accounts {
		if s.balances[a] != want[a] {
			report("account %d has balance %d, want %d", a, s.balances[a], want[a])
		}
	}
	keys := map[string]bool{}
	for _, k := range s.keys {
		keys[k] = true
	}
	// A poison message the handler refused is claimed with its batch and kept from the
	// handler: its key is stored, or the offsets move past it. One without a key is not.
	wantKeys, records := len(messages), len(messages)
	for i := range o.messages {
		switch o.poisonKind(i) {
		case poisonHandler:
			wantKeys++
			records++
		case poisonNoKey:
			records++
		}
	}
	switch {
	case o.mode == "offsets" && (len(s.keys) != 0 || s.offsets != int64(records)):
		report("the inbox holds %d keys and offsets past %d records, for %d records (offset mode: no key, offsets at the partitions' ends)", len(s.keys), s.offsets, records)
	case o.mode != "offsets" && (len(s.keys) != wantKeys || len(keys) != wantKeys):
		report("the inbox holds %d keys (%d distinct) for %d messages and %d poison ones the handler refused", len(s.keys), len(keys), len(messages), wantKeys-len(messages))
	}
	if lost+twice+wrong > 0 {
		problems = append([]string{tally(lost, twice, wrong)}, problems...)
	}
	return problems
}

// tally is the first problem checkMessages reports when any message went wrong.
func tally(lost, twice, wrong int) string {
	return fmt.Sprintf("%d messages never applied (lost, or not delivered yet), %d applied more than once, %d applied wrongly", lost, twice, wrong)
}
