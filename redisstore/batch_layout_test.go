package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
	"github.com/watermill-inbox/inbox/redisstore"
)

// Batches on the key layout of single messages (issue 22): the generation Forget bumps,
// the waiter set, the stored failed commands and the attempts a commit ends, on Redis
// and on the Cluster.

// oneTag puts every key of a test in one slot, as a Cluster needs for a batch.
func oneTag(string, string) string { return "batch" }

// onRedisAndCluster runs test on the shared Redis and on the Cluster.
func onRedisAndCluster(t *testing.T, test func(t *testing.T, client redis.UniversalClient)) {
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		test(t, sharedClient(t))
	})
	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		test(t, clusterClient(t))
	})
}

// queueIncr queues INCR key once per fresh message.
func queueIncr(ctx context.Context, key string, fresh []int) error {
	for range fresh {
		if err := incr(ctx, key); err != nil {
			return err
		}
	}
	return nil
}

// A Forget of one of a batch's keys while the batch runs: the batch claimed before it,
// so its commit is refused (ErrLeaseLost, nothing applied), as a single delivery's is
// (ADR 68), and the next batch processes every message.
func TestForgetDuringABatchRefusesItsCommit(t *testing.T) {
	t.Parallel()
	onRedisAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		store, ib := newStore(t, client, redisstore.Config{HashTag: oneTag})
		counter := store.Config().Prefix + "counter:{batch}"
		ctx := context.Background()
		batch := []inbox.Item{{Key: "order-1"}, {Key: "order-2"}}
		_, err := ib.ProcessBatch(ctx, "billing", batch, func(ctx context.Context, fresh []int) error {
			if err := queueIncr(ctx, counter, fresh); err != nil {
				return err
			}
			found, err := store.Forget(ctx, "billing", "order-2")
			require.NoError(t, err)
			require.False(t, found, "nothing committed yet")
			return nil
		})
		require.ErrorIs(t, err, redisstore.ErrLeaseLost)
		require.Zero(t, client.Exists(ctx, counter).Val(), "the refused commit applied nothing")

		res, err := ib.ProcessBatch(ctx, "billing", batch, func(ctx context.Context, fresh []int) error { return queueIncr(ctx, counter, fresh) })
		require.NoError(t, err)
		require.Equal(t, 2, res.Processed, "the next batch processes both messages")
		require.Equal(t, "2", client.Get(ctx, counter).Val())

		// Forgotten after its commit, a key is new again in a batch, and only it.
		found, err := store.Forget(ctx, "billing", "order-1")
		require.NoError(t, err)
		require.True(t, found)
		res, err = ib.ProcessBatch(ctx, "billing", batch, func(ctx context.Context, fresh []int) error { return queueIncr(ctx, counter, fresh) })
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, res.Duplicate)
		require.Equal(t, "3", client.Get(ctx, counter).Val())
	})
}

// A batch commit whose connection breaks after the script ran is resent by go-redis:
// the resend reports the commands that failed in the first run, as a single commit's
// does, or ErrCommandFailed is lost.
func TestResentBatchCommitKeepsTheFailedCommands(t *testing.T) {
	t.Parallel()
	b := &breaker{}
	client := breakerClient(t, b, nil)
	store, ib := newStore(t, client, redisstore.Config{})
	text, counter := store.Config().Prefix+"text", store.Config().Prefix+"counter"
	ctx := context.Background()
	require.NoError(t, client.Set(ctx, text, "not a number", 0).Err())

	b.breakNext(1, naming(counter)) // the commit, which carries the handler's commands
	res, err := ib.ProcessBatch(ctx, "billing", []inbox.Item{{Key: "order-1"}, {Key: "order-2"}}, func(ctx context.Context, fresh []int) error {
		if err := queueIncr(ctx, counter, fresh); err != nil {
			return err
		}
		return incr(ctx, text)
	})
	require.EqualValues(t, 1, b.broken.Load(), "the commit's connection broke after the script ran")
	require.ErrorIs(t, err, redisstore.ErrCommandFailed)
	require.ErrorContains(t, err, "command 3 (incr)")
	require.Zero(t, res.Processed)
	require.Equal(t, "2", client.Get(ctx, counter).Val(), "applied once")
	again, err := ib.ProcessBatch(ctx, "billing", []inbox.Item{{Key: "order-1"}, {Key: "order-2"}}, func(context.Context, []int) error { return nil })
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, again.Duplicate, "the keys were committed once")
}

// wakes counts the BLPOPs of waiting deliveries that a commit or release woke (the
// others timed out).
type wakes struct{ n atomic.Int32 }

func (h *wakes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *wakes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "blpop" && err == nil {
			h.n.Add(1)
		}
		return err
	}
}
func (h *wakes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A single delivery waiting for a key a batch holds, and a batch waiting for a key a
// single delivery holds, are both waiters of the key (one set): the other's commit
// wakes them, and they find the key a duplicate. Before, a batch counted its waiters in
// a field that single commits do not read, and the other way round, so each waited
// until its BLPOP timed out.
func TestSingleAndBatchWakeEachOther(t *testing.T) {
	t.Parallel()
	onRedisAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		woken := &wakes{}
		client.AddHook(woken)
		store, ib := newStore(t, client, redisstore.Config{HashTag: oneTag, Wait: time.Minute})
		waiters := store.Config().Prefix + "w:{batch}:7:billing:"
		ctx := context.Background()

		t.Run("SingleWaitsForABatch", func(t *testing.T) {
			inHandler, commit, batchDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				_, err := ib.ProcessBatch(ctx, "billing", []inbox.Item{{Key: "order-1"}, {Key: "order-2"}}, func(context.Context, []int) error {
					close(inHandler)
					<-commit
					return nil
				})
				batchDone <- err
			}()
			<-inHandler
			single := make(chan bool, 1)
			go func() {
				dup, err := ib.Process(ctx, "billing", "order-2", func(context.Context) error { return nil })
				if err != nil {
					t.Error(err)
				}
				single <- dup
			}()
			require.Eventually(t, func() bool { return client.SCard(ctx, waiters+"order-2").Val() == 1 }, 10*time.Second, time.Millisecond,
				"the single delivery waits as a waiter of the key")
			before := woken.n.Load()
			close(commit)
			require.NoError(t, <-batchDone)
			require.True(t, <-single, "a key the batch committed is a duplicate alone")
			require.Greater(t, woken.n.Load(), before, "the batch's commit woke the single delivery")
		})

		t.Run("BatchWaitsForASingle", func(t *testing.T) {
			inHandler, commit, singleDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				_, err := ib.Process(ctx, "billing", "order-3", func(context.Context) error {
					close(inHandler)
					<-commit
					return nil
				})
				singleDone <- err
			}()
			<-inHandler
			type verdict struct {
				res inbox.BatchResult
				err error
			}
			batch := make(chan verdict, 1)
			go func() {
				res, err := ib.ProcessBatch(ctx, "billing", []inbox.Item{{Key: "order-3"}, {Key: "order-4"}}, func(context.Context, []int) error { return nil })
				batch <- verdict{res, err}
			}()
			require.Eventually(t, func() bool { return client.SCard(ctx, waiters+"order-3").Val() == 1 }, 10*time.Second, time.Millisecond,
				"the batch waits as a waiter of the key")
			before := woken.n.Load()
			close(commit)
			require.NoError(t, <-singleDone)
			v := <-batch
			require.NoError(t, v.err)
			require.Equal(t, []bool{true, false}, v.res.Duplicate, "a key processed alone is a duplicate in the batch")
			require.Greater(t, woken.n.Load(), before, "the single commit woke the batch")
		})
	})
}

// A batch's commit ends the attempts single deliveries started on its keys (MaxAttempts
// on another Inbox of the same store), as a single commit does: nothing of them
// outlives the key.
func TestBatchCommitEndsTheKeysAttempts(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	store, counting := newCountingStore(t, client, redisstore.Config{}, 3)
	plain, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.NoError(t, err)
	attempts := store.Config().Prefix + "s:{t}:7:billing:order-1"
	ctx := context.Background()
	func() {
		defer func() { require.NotNil(t, recover()) }()
		_, _ = counting.Process(ctx, "billing", "order-1", func(context.Context) error { panic("crash") })
	}()
	require.EqualValues(t, 1, client.SCard(ctx, attempts).Val(), "the panicking delivery's attempt never ended")

	res, err := plain.ProcessBatch(ctx, "billing", []inbox.Item{{Key: "order-1"}}, func(context.Context, []int) error { return nil })
	require.NoError(t, err)
	require.Equal(t, 1, res.Processed)
	require.Zero(t, client.Exists(ctx, attempts).Val(), "the batch's commit ended the key's attempts")
}

// Every round trip of a batch's life is broken in turn after the server ran it: go-redis
// resends it, and what the caller sees, and what Redis holds, must be what a run
// without a fault gives.
func TestEveryBatchRoundTripIsSafeToResend(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, env resendEnv) []any {
		ib := env.batches
		env.client.Set(env.ctx, env.counter+":text", "x", 0)
		var seen []any
		batch := []inbox.Item{{Key: "a"}, {Key: "b"}, {Key: "c"}}
		for _, step := range []string{"fail", "commit", "again", "forget", "failed-command"} {
			if step == "forget" {
				found, err := env.store.Forget(env.ctx, "billing", "b")
				seen = append(seen, found, err)
			}
			res, err := ib.ProcessBatch(env.ctx, "billing", batch, func(ctx context.Context, fresh []int) error {
				if err := queueIncr(ctx, env.counter, fresh); err != nil {
					return err
				}
				switch step {
				case "fail":
					return errCleanFailure
				case "failed-command":
					return incr(ctx, env.counter+":text")
				}
				return nil
			})
			seen = append(seen, res, errors.Is(err, errCleanFailure), errors.Is(err, redisstore.ErrCommandFailed), errText(err))
			if step == "forget" {
				batch = append(batch, inbox.Item{Key: "d"}) // the failed command's batch
			}
		}
		dup, err := ib.Process(env.ctx, "billing", "b", func(context.Context) error { return nil })
		return append(seen, dup, err, env.client.Get(env.ctx, env.counter).Val())
	}
	clean := &breaker{}
	want := run(t, newResendEnv(t, clean))
	trips := int(clean.writes.Load())
	require.Positive(t, trips)
	t.Logf("%d round trips, each broken in turn", trips)
	for n := 1; n <= trips; n++ {
		b := &breaker{}
		env := newResendEnv(t, b)
		b.breakNth(n)
		got := run(t, env)
		require.EqualValues(t, 1, b.broken.Load(), "round trip %d of %d broke once", n, trips)
		require.Equal(t, want, got, "round trip %d of %d broken and resent", n, trips)
	}
}

// errText is err's text without what differs between runs (none so far), "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return strings.TrimSpace(err.Error())
}

// The fault injector of the conformance suite (internal/netfault) breaks a batch's claim
// and then its commit after the server ran them, on Redis and on the Cluster (every
// node the Cluster client dials goes through it): go-redis resends each, and the
// resends give the first run's answers, the failed command included.
func TestBatchThroughTheFaultInjector(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"Redis", "Cluster"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			inj := netfault.New(netfault.RESP)
			var client redis.UniversalClient
			if where == "Redis" {
				sharedClient(t)
				client = redis.NewClient(&redis.Options{Addr: sharedAddr(), Dialer: inj.DialContext})
			} else {
				clusterClient(t)
				client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.addrs, Dialer: inj.DialContext})
			}
			t.Cleanup(func() { _ = client.Close() })
			store, ib := newStore(t, client, redisstore.Config{HashTag: oneTag})
			prefix := store.Config().Prefix
			counter, text := prefix+"counter:{batch}", prefix+"text:{batch}"
			ctx := context.Background()
			require.NoError(t, client.Set(ctx, text, "not a number", 0).Err())

			claim := inj.Arm(netfault.Step{Match: netfault.Contains(" " + prefix + "c:{batch}")}, netfault.AfterReply)
			var commit *netfault.Fault
			batch := []inbox.Item{{Key: "order-1"}, {Key: "order-2"}}
			res, err := ib.ProcessBatch(ctx, "billing", batch, func(ctx context.Context, fresh []int) error {
				require.True(t, claim.HasFired(), "the claim's connection broke after the script ran")
				commit = inj.Arm(netfault.Step{Match: netfault.Contains(" " + counter)}, netfault.AfterReply) // one fault at a time
				if err := queueIncr(ctx, counter, fresh); err != nil {
					return err
				}
				return incr(ctx, text)
			})
			require.True(t, claim.HasFired(), "the claim's connection broke after the script ran")
			require.True(t, commit.HasFired(), "the commit's connection broke after the script ran")
			require.NoError(t, inj.Err())
			require.ErrorIs(t, err, redisstore.ErrCommandFailed, "the resent commit reports the failed command")
			require.Zero(t, res.Processed)
			require.Equal(t, "2", client.Get(ctx, counter).Val(), "applied once")
			again, err := ib.ProcessBatch(ctx, "billing", batch, func(context.Context, []int) error { return nil })
			require.NoError(t, err)
			require.Equal(t, []bool{true, true}, again.Duplicate)
		})
	}
}

// Single deliveries and batches racing on overlapping keys, through the same scripts'
// keys: every message is applied exactly once between them, and every key ends
// committed.
func TestSinglesAndBatchesRacing(t *testing.T) {
	t.Parallel()
	onRedisAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		store, ib := newStore(t, client, redisstore.Config{HashTag: oneTag, Wait: time.Minute})
		hits := store.Config().Prefix + "hits:{batch}"
		ctx := context.Background()
		const keys, workers, rounds = 30, 6, 5
		key := func(i int) string { return "order-" + strconv.Itoa(i%keys) }
		apply := func(ctx context.Context, k string) error {
			tx, _ := inbox.TxFromContext[*redisstore.Tx](ctx)
			return tx.HIncrBy(ctx, hits, k, 1).Err()
		}
		var wg sync.WaitGroup
		errs := make(chan error, workers*rounds*keys)
		for w := range workers {
			wg.Go(func() {
				for r := range rounds {
					start := w*5 + r*7
					if w%2 == 0 { // a batch of 10 overlapping keys
						var batch []inbox.Item
						for i := range 10 {
							batch = append(batch, inbox.Item{Key: key(start + i)})
						}
						_, err := ib.ProcessBatch(ctx, "billing", batch, func(ctx context.Context, fresh []int) error {
							for _, i := range fresh {
								if err := apply(ctx, batch[i].Key); err != nil {
									return err
								}
							}
							return nil
						})
						errs <- err
						continue
					}
					for i := range 10 { // the same window, one message at a time
						k := key(start + i)
						_, err := ib.Process(ctx, "billing", k, func(ctx context.Context) error { return apply(ctx, k) })
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		applied, err := client.HGetAll(ctx, hits).Result()
		require.NoError(t, err)
		for k, n := range applied {
			require.Equal(t, "1", n, "key %s applied once", k)
		}
		for i := range keys {
			dup, err := ib.Process(ctx, "billing", key(i), func(ctx context.Context) error { return apply(ctx, key(i)) })
			require.NoError(t, err)
			require.Equal(t, applied[key(i)] == "1", dup, "key %s: committed exactly when it was applied", key(i))
		}
	})
}
