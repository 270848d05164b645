package benchload

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/watermill-inbox/inbox"
)

// The workloads of batches and offset mode. A batch's handler updates the accounts of
// all its messages in one statement, as a batch consumer does; the same messages one
// by one each update theirs in a transaction of their own.

// BatchOps returns, for batches of size messages: the messages one by one, each through
// the inbox (Inbox.Process); the batch through the inbox (Inbox.ProcessBatch); and the
// batch in a plain transaction, without the inbox. Each op handles size messages, keyed
// from the op's key.
func (t *Target) BatchOps(size int) (singles, batch, plain Op) {
	keysOf := func(key string) []string {
		keys := make([]string, size)
		for i := range keys {
			keys[i] = key + "/" + strconv.Itoa(i)
		}
		return keys
	}
	singles = func(ctx context.Context, key string) error {
		for _, k := range keysOf(key) {
			if err := t.WithInbox(ctx, k); err != nil {
				return err
			}
		}
		return nil
	}
	batch = func(ctx context.Context, key string) error {
		keys := keysOf(key)
		items := make([]inbox.Item, len(keys))
		for i, k := range keys {
			items[i] = inbox.Item{Key: k}
		}
		res, err := t.Inbox.ProcessBatch(ctx, t.consumer, items, func(ctx context.Context, fresh []int) error {
			return t.batchWork(ctx, txOf(ctx), pick(keys, fresh))
		})
		if err == nil && res.Processed != size {
			err = fmt.Errorf("a batch of %d new keys processed %d", size, res.Processed)
		}
		return err
	}
	plain = func(ctx context.Context, key string) error {
		keys := keysOf(key)
		if t.Pool != nil {
			return pgx.BeginFunc(ctx, t.Pool, func(tx pgx.Tx) error { return t.batchWork(ctx, tx, keys) })
		}
		tx, err := t.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := t.batchWork(ctx, tx, keys); err != nil {
			return join(err, tx.Rollback())
		}
		return tx.Commit()
	}
	return singles, batch, plain
}

func pick(keys []string, indexes []int) []string {
	out := make([]string, len(indexes))
	for i, j := range indexes {
		out[i] = keys[j]
	}
	return out
}

func join(err, other error) error {
	if other != nil {
		return fmt.Errorf("%w; %v", err, other)
	}
	return err
}

// batchWork adds 1 to the account of each key: on PostgreSQL it locks the accounts in
// id order, then updates them in one statement (two in one round trip through pgx); on
// MySQL one multi-row upsert in id order. Locking in one order keeps two batches over
// the same accounts from deadlocking, as a batch handler must.
func (t *Target) batchWork(ctx context.Context, tx any, keys []string) error {
	ids := make([]int32, len(keys))
	for i, k := range keys {
		ids[i] = int32(account(k))
	}
	slices.Sort(ids)
	lock := `SELECT id FROM ` + t.quote(t.accounts) + ` WHERE id = ANY($1::int[]) ORDER BY id FOR UPDATE`
	update := `UPDATE ` + t.quote(t.accounts) + ` a SET n = a.n + c.cnt FROM (SELECT id, count(*) AS cnt FROM unnest($1::int[]) AS id GROUP BY id) c WHERE a.id = c.id`
	switch tx := tx.(type) {
	case pgx.Tx:
		batch := &pgx.Batch{}
		batch.Queue(lock, ids)
		batch.Queue(update, ids)
		return tx.SendBatch(ctx, batch).Close()
	case *sql.Tx:
		if !t.mysql() {
			if _, err := tx.ExecContext(ctx, lock, ids); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, update, ids)
			return err
		}
		var b strings.Builder
		b.WriteString(`INSERT INTO ` + t.quote(t.accounts) + ` (id, n) VALUES `)
		for i, id := range ids {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "(%d, 1)", id)
		}
		b.WriteString(` ON DUPLICATE KEY UPDATE n = n + 1`)
		_, err := tx.ExecContext(ctx, b.String())
		return err
	}
	return fmt.Errorf("unexpected transaction %T", tx)
}

// partitions hands out partitions of offset mode, one op at a time each, with the
// offset each is at: concurrent ops never share a partition, as consumers of one group
// never do.
type partitions struct {
	once sync.Once
	free chan *benchPartition
}

// fill makes the 64 partitions.
func (p *partitions) fill() {
	p.free = make(chan *benchPartition, 64)
	for i := range int32(64) {
		p.free <- &benchPartition{id: i}
	}
}

type benchPartition struct {
	id   int32
	next int64
}

// WithOffsets is the handler behind the inbox in offset mode, one message at a time
// (Inbox.ProcessOffsets with one position): the next offset of a partition no other op
// holds meanwhile.
func (t *Target) WithOffsets(ctx context.Context, key string) error {
	t.parts.once.Do(t.parts.fill)
	var p *benchPartition
	select {
	case p = <-t.parts.free:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { t.parts.free <- p }()
	pos := []inbox.Position{{Topic: "bench", Partition: p.id, Offset: p.next, LeaderEpoch: inbox.NoLeaderEpoch}}
	res, err := t.Inbox.ProcessOffsets(ctx, t.consumer, pos, func(ctx context.Context, _ []int) error {
		return t.work(ctx, txOf(ctx), key)
	})
	if err == nil && res.Processed != 1 {
		err = fmt.Errorf("offset %d of partition %d was not new", p.next, p.id)
	}
	p.next++
	return err
}

// WithOffsetBatch returns the op of a batch of size records of one partition through
// the inbox in offset mode (Inbox.ProcessOffsets: one UPDATE of the partition's row for
// the batch), with the same handler as BatchOps' batch.
func (t *Target) WithOffsetBatch(size int) Op {
	return func(ctx context.Context, key string) error {
		t.parts.once.Do(t.parts.fill)
		var p *benchPartition
		select {
		case p = <-t.parts.free:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { t.parts.free <- p }()
		keys := make([]string, size)
		positions := make([]inbox.Position, size)
		for i := range keys {
			keys[i] = key + "/" + strconv.Itoa(i)
			positions[i] = inbox.Position{Topic: "bench", Partition: p.id, Offset: p.next + int64(i), LeaderEpoch: inbox.NoLeaderEpoch}
		}
		res, err := t.Inbox.ProcessOffsets(ctx, t.consumer, positions, func(ctx context.Context, fresh []int) error {
			return t.batchWork(ctx, txOf(ctx), pick(keys, fresh))
		})
		if err == nil && res.Processed != size {
			err = fmt.Errorf("a batch of %d new records processed %d", size, res.Processed)
		}
		p.next += int64(size)
		return err
	}
}
