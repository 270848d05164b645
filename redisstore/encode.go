package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// encode flattens the handler's queued commands into the commit script's arguments (per
// command its argument count, then its arguments), after checking each against the
// server's command table, so that a command the script would refuse is refused before
// anything runs. With slot checks on, it returns the commands' keys, all in the claim's
// slot, to declare them to the script.
func (s *Store) encode(ctx context.Context, k claimKeys, cmds []redis.Cmder) ([]any, []string, error) {
	if len(cmds) == 0 {
		return nil, nil, nil
	}
	table, err := s.commandTable(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: reading the command table to check the queued commands: %w", err)
	}
	var argv []any
	var keys []string
	slot := Slot(k.name(kindClaim))
	for i, cmd := range cmds {
		args := cmd.Args()
		info, name, err := table.lookup(args)
		if err == nil {
			err = info.check(args)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: command %d (%s): %w", i+1, name, err)
		}
		if s.slots {
			cmdKeys, err := s.commandKeys(ctx, info, args)
			if err != nil {
				return nil, nil, fmt.Errorf("redisstore: command %d (%s): %w", i+1, name, err)
			}
			for _, key := range cmdKeys {
				if Slot(key) != slot {
					return nil, nil, fmt.Errorf("redisstore: command %d (%s) key %q is in slot %d, the claim's keys in slot %d: %w; nothing was applied",
						i+1, name, key, Slot(key), slot, ErrCrossSlot)
				}
			}
			keys = append(keys, cmdKeys...)
		}
		argv = append(argv, len(args))
		argv = append(argv, args...)
	}
	return argv, keys, nil
}

// runCommit runs the commit script: by SHA (loaded by Verify) with a fallback to EVAL,
// or, with Config.Replicas, followed by WAIT on the same primary in the same round trip.
func (s *Store) runCommit(ctx context.Context, keys []string, args []any) ([]any, error) {
	return s.runScript(ctx, commitScript, keys, args)
}

// runScript runs a commit script (commitScript, commitBatchScript) as runCommit says.
func (s *Store) runScript(ctx context.Context, script *redis.Script, keys []string, args []any) ([]any, error) {
	if s.cfg.Replicas == 0 {
		return script.Run(ctx, s.client, keys, args...).Slice()
	}
	var node redis.Cmdable = s.client
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		primary, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		node = primary
	}
	res, acked, err := s.evalAndWait(ctx, node, script, keys, args, true)
	if redis.HasErrorPrefix(err, "NOSCRIPT") { // the script cache was flushed (a restart): nothing ran
		res, acked, err = s.evalAndWait(ctx, node, script, keys, args, false)
	}
	switch {
	case err != nil:
		return nil, err
	case acked < 0: // refused: nothing to wait for
		return res, nil
	case acked < int64(s.cfg.Replicas):
		return nil, fmt.Errorf("applied on the primary, %d of %d replicas acknowledged it within %v: %w",
			acked, s.cfg.Replicas, s.cfg.ReplicaTimeout, ErrNotReplicated)
	}
	return res, nil
}

// evalAndWait sends the commit script and WAIT in one pipeline. acked is -1 when the
// script refused the commit.
func (s *Store) evalAndWait(ctx context.Context, node redis.Cmdable, script *redis.Script, keys []string, args []any, bySHA bool) (res []any, acked int64, err error) {
	pipe := node.Pipeline()
	var eval *redis.Cmd
	if bySHA {
		eval = script.EvalSha(ctx, pipe, keys, args...)
	} else {
		eval = script.Eval(ctx, pipe, keys, args...)
	}
	wait := redis.NewIntCmd(ctx, "wait", s.cfg.Replicas, s.cfg.ReplicaTimeout.Milliseconds())
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	if res, err = eval.Slice(); err != nil {
		return nil, 0, err
	}
	if status, _ := res[0].(int64); status == 0 {
		return res, -1, nil
	}
	if acked, err = wait.Result(); err != nil {
		return nil, 0, fmt.Errorf("applied on the primary, but WAIT failed: %w", err)
	}
	return res, acked, nil
}
