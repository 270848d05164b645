package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The server's command table, read once with COMMAND, against which the commit checks
// the handler's queued commands before anything runs. go-redis's own reading of COMMAND
// (Client.Command) drops the subcommands, whose entries (XGROUP CREATE, SCRIPT EXISTS,
// OBJECT ENCODING, CONFIG GET...) carry the key positions and flags that their
// container's entry lacks; so the store reads the reply itself.

// commandInfo is one entry of the command table.
type commandInfo struct {
	name              string // "xgroup|create" for a subcommand
	arity             int    // the arguments, the name(s) included; negative: at least -arity
	flags             []string
	first, last, step int // the key positions, as COMMAND's legacy key range gives them
	subcommands       map[string]*commandInfo
}

// commandTable maps a command's lower-case name to its entry.
type commandTable map[string]*commandInfo

// readCommandTable reads COMMAND. An entry it cannot parse fails the whole table: a
// command must never be checked against a guess.
func readCommandTable(ctx context.Context, client redis.UniversalClient) (commandTable, error) {
	reply, err := client.Do(ctx, "command").Slice()
	if err != nil {
		return nil, err
	}
	table := make(commandTable, len(reply))
	for _, e := range reply {
		info, err := parseCommandInfo(e)
		if err != nil {
			return nil, fmt.Errorf("reading the reply of COMMAND: %w", err)
		}
		table[info.name] = info
	}
	return table, nil
}

// parseCommandInfo parses one entry: name, arity, flags, first key, last key, step, and
// from Redis 7 on, ACL categories, tips, key specs and subcommands.
func parseCommandInfo(e any) (*commandInfo, error) {
	fields, ok := e.([]any)
	if !ok || len(fields) < 6 {
		return nil, fmt.Errorf("an entry is %T with %d fields, not an array of at least 6", e, len(fields))
	}
	name, ok := fields[0].(string)
	if !ok {
		return nil, fmt.Errorf("a command name is %T", fields[0])
	}
	info := &commandInfo{name: strings.ToLower(name)}
	ints := []*int{&info.arity, nil, &info.first, &info.last, &info.step}
	for i, dst := range ints {
		if dst == nil {
			continue
		}
		n, ok := fields[1+i].(int64)
		if !ok {
			return nil, fmt.Errorf("%s: field %d is %T, not an integer", name, 2+i, fields[1+i])
		}
		*dst = int(n)
	}
	flags, ok := fields[2].([]any)
	if !ok {
		return nil, fmt.Errorf("%s: its flags are %T", name, fields[2])
	}
	for _, f := range flags {
		flag, ok := f.(string)
		if !ok {
			return nil, fmt.Errorf("%s: a flag is %T", name, f)
		}
		info.flags = append(info.flags, strings.ToLower(flag))
	}
	if len(fields) >= 10 && fields[9] != nil {
		subs, ok := fields[9].([]any)
		if !ok {
			return nil, fmt.Errorf("%s: its subcommands are %T", name, fields[9])
		}
		for _, sub := range subs {
			subInfo, err := parseCommandInfo(sub)
			if err != nil {
				return nil, err
			}
			_, subName, ok := strings.Cut(subInfo.name, "|")
			if !ok {
				return nil, fmt.Errorf("%s: subcommand %q is not named container|subcommand", name, subInfo.name)
			}
			if info.subcommands == nil {
				info.subcommands = map[string]*commandInfo{}
			}
			info.subcommands[subName] = subInfo
		}
	}
	return info, nil
}

// lookup returns the entry that describes args: the subcommand's own entry for a
// container command (XGROUP, SCRIPT, OBJECT, CONFIG...), and a readable name.
func (t commandTable) lookup(args []any) (*commandInfo, string, error) {
	name := strings.ToLower(fmt.Sprint(args[0]))
	info, ok := t[name]
	if !ok {
		return nil, name, fmt.Errorf("%w: the server does not know it", ErrCommandRefused)
	}
	if len(info.subcommands) == 0 {
		return info, name, nil
	}
	if len(args) < 2 {
		return nil, name, fmt.Errorf("%w: it takes a subcommand", ErrCommandRefused)
	}
	sub := strings.ToLower(fmt.Sprint(args[1]))
	name += " " + sub
	if info, ok = info.subcommands[sub]; !ok {
		return nil, name, fmt.Errorf("%w: the server does not know this subcommand", ErrCommandRefused)
	}
	return info, name, nil
}

// check refuses a command the commit script could not run as it is: a wrong number of
// arguments, or a command Redis does not run in a script.
func (info *commandInfo) check(args []any) error {
	switch {
	case info.arity > 0 && len(args) != info.arity, info.arity < 0 && len(args) < -info.arity:
		return fmt.Errorf("%w: %d arguments, the command takes %d (negative: at least)", ErrCommandRefused, len(args), info.arity)
	case slices.Contains(info.flags, "noscript"):
		return fmt.Errorf("%w: Redis does not run it in a script; run it outside the inbox transaction", ErrCommandRefused)
	}
	return nil
}

// keys returns the keys among a command's arguments, from the entry's key positions, or
// from COMMAND GETKEYS (a round trip) for a command whose keys move. A command whose keys
// the server cannot name is refused.
func (s *Store) commandKeys(ctx context.Context, info *commandInfo, args []any) ([]string, error) {
	if slices.Contains(info.flags, "movablekeys") {
		keys, err := s.client.CommandGetKeys(ctx, args...).Result()
		if err != nil {
			return nil, fmt.Errorf("%w: its keys cannot be determined (COMMAND GETKEYS: %v)", ErrCommandRefused, err)
		}
		return keys, nil
	}
	first, last, step := info.first, info.last, info.step
	if first <= 0 {
		return nil, nil
	}
	if last < 0 {
		last += len(args)
	}
	last = min(last, len(args)-1)
	var keys []string
	for i := first; i <= last; i += max(step, 1) {
		keys = append(keys, fmt.Sprint(args[i]))
	}
	return keys, nil
}

// commandTable returns the server's command table, read once.
func (s *Store) commandTable(ctx context.Context) (commandTable, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commands != nil {
		return s.commands, nil
	}
	table, err := readCommandTable(ctx, s.client)
	if err != nil {
		return nil, err
	}
	s.commands = table
	return table, nil
}
