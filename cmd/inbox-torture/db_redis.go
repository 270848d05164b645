package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/redisstore"
)

// redisLease is the workers' claim lease: longer than a handler (-handler-delay, twice),
// short enough that the keys a SIGKILLed worker held are free again within the run.
const redisLease = 3 * time.Second

// redisDB is the harness's Redis (-dsn is its address): every key of the run starts with
// the run id; worker connections are named inbox-torture-<run> (CLIENT SETNAME), which
// CLIENT LIST shows, so the parent finds and kills them. The ledger is a list of
// "key account amount" entries and a hash of balances, written through the inbox
// transaction.
type redisDB struct {
	client           *redis.Client
	run, name        string
	ledgerK, balance string
	st               *redisstore.Store
}

func openRedis(ctx context.Context, o options, worker bool) (*redisDB, error) {
	r := &redisDB{run: o.run, name: "inbox-torture-" + o.run}
	opts := &redis.Options{Addr: o.dsn, ClientName: "inbox-torture-parent", PoolSize: 4}
	if worker {
		// No retries: a killed connection fails the claim, the BLPOP or the commit, and
		// the message is nacked, instead of go-redis resending the script.
		opts.ClientName, opts.PoolSize, opts.MaxRetries = r.name, o.concurrency*2+2, -1
	}
	r.client = redis.NewClient(opts)
	if err := r.client.Ping(ctx).Err(); err != nil {
		_ = r.client.Close()
		return nil, fmt.Errorf("Redis at -dsn: %w", err)
	}
	r.ledgerK, r.balance = o.run+":ledger", o.run+":balances"
	var err error
	if r.st, err = redisstore.New(r.client, redisstore.Config{Prefix: o.run + ":inbox:", Lease: redisLease}); err != nil {
		_ = r.client.Close()
		return nil, err
	}
	return r, nil
}

func (r *redisDB) setup(ctx context.Context, accounts int) error {
	for a := range accounts {
		if err := r.client.HSet(ctx, r.balance, strconv.Itoa(a), 0).Err(); err != nil {
			return err
		}
	}
	return nil
}

// workerClients returns the IDs of the workers' connections, those blocked in a BLPOP (a
// waiting duplicate; Redis runs one command at a time, so no other is mid-command)
// first.
func (r *redisDB) workerClients(ctx context.Context) ([]string, error) {
	list, err := r.client.ClientList(ctx).Result()
	if err != nil {
		return nil, err
	}
	var busy, idle []string
	for _, line := range strings.Split(list, "\n") {
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		if fields["name"] != r.name {
			continue
		}
		if fields["cmd"] == "blpop" {
			busy = append(busy, fields["id"])
		} else {
			idle = append(idle, fields["id"])
		}
	}
	rand.Shuffle(len(busy), func(i, j int) { busy[i], busy[j] = busy[j], busy[i] })
	rand.Shuffle(len(idle), func(i, j int) { idle[i], idle[j] = idle[j], idle[i] })
	return append(busy, idle...), nil
}

func (r *redisDB) terminate(ctx context.Context) (bool, error) {
	ids, err := r.workerClients(ctx)
	if err != nil || len(ids) == 0 {
		return false, err
	}
	n, err := r.client.Do(ctx, "client", "kill", "id", ids[0]).Int()
	return n > 0, err
}

func (r *redisDB) workerConns(ctx context.Context) (int, error) {
	ids, err := r.workerClients(ctx)
	return len(ids), err
}

func (r *redisDB) ledger(ctx context.Context) (ledgerState, error) {
	s := ledgerState{balances: map[int]int64{}}
	entries, err := r.client.LRange(ctx, r.ledgerK, 0, -1).Result()
	if err != nil {
		return s, err
	}
	for _, line := range entries {
		var e entry
		if _, err := fmt.Sscan(line, &e.key, &e.account, &e.amount); err != nil {
			return s, fmt.Errorf("ledger entry %q: %w", line, err)
		}
		s.entries = append(s.entries, e)
	}
	balances, err := r.client.HGetAll(ctx, r.balance).Result()
	if err != nil {
		return s, err
	}
	for a, b := range balances {
		account, err1 := strconv.Atoi(a)
		balance, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil {
			return s, fmt.Errorf("balance %q=%q", a, b)
		}
		s.balances[account] = balance
	}
	// The inbox keys: <prefix>c:{<tag>}:<n>:<consumer>:<key>, committed when they have t.
	iter := r.client.ScanType(ctx, 0, r.run+":inbox:c:*", 1000, "hash").Iterator()
	for iter.Next(ctx) {
		name := iter.Val()
		if committed, err := r.client.HExists(ctx, name, "t").Result(); err != nil {
			return s, err
		} else if !committed {
			continue // claimed and rolled back, never committed
		}
		_, rest, _ := strings.Cut(name, "}:")
		_, rest, _ = strings.Cut(rest, ":")
		if key, ok := strings.CutPrefix(rest, consumer+":"); ok {
			s.keys = append(s.keys, key)
		}
	}
	return s, iter.Err()
}

func (r *redisDB) drop(ctx context.Context) error {
	iter := r.client.Scan(ctx, 0, r.run+":*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := r.client.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

func (r *redisDB) store() inbox.Store { return r.st }

func (r *redisDB) credit(ctx context.Context, key string, account, amount int) error {
	tx, ok := inbox.TxFromContext[*redisstore.Tx](ctx)
	if !ok {
		return fmt.Errorf("no *redisstore.Tx in the context")
	}
	if err := tx.RPush(ctx, r.ledgerK, fmt.Sprint(key, " ", account, " ", amount)).Err(); err != nil {
		return err
	}
	sleepUpTo(ctx)
	return tx.HIncrBy(ctx, r.balance, strconv.Itoa(account), int64(amount)).Err()
}

func (r *redisDB) close() { _ = r.client.Close() }
