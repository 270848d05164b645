// Package redisstore is an inbox.Store on Redis (github.com/redis/go-redis/v9), for
// handlers whose state lives in Redis (counters, balances, leaderboards, rate limits,
// caches) and handlers with no database at all; and a Redis ExpiringKeyRepository for
// Watermill's middleware.Deduplicator. The root package never imports it, so go-redis
// is only in the build of programs that do.
//
// # The guarantee, per kind of effect
//
// Effects written to Redis through the store's transaction are applied exactly once.
// The handler gets a *Tx from inbox.TxFromContext and queues its writes on it (it is a
// redis.Pipeliner). They run at commit, in one Lua script with the key, and only if
// this delivery still holds the key's lease; a delivery whose lease expired and was
// taken over is refused (ErrLeaseLost), nothing applied, and nacked.
//
// Effects outside Redis (an HTTP call, a database not in the transaction) are
// deduplicated once completed: a process killed mid-handler processes the message
// again after its lease expires.
//
// # Usage
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisstore.New(client, redisstore.Config{})
//	ib, err := inbox.New(inbox.Config{Store: store})
//	router.AddMiddleware(ib.Middleware)
//	router.AddConsumerHandler("billing", "orders", sub, func(msg *message.Message) error {
//		tx, _ := inbox.TxFromContext[*redisstore.Tx](msg.Context())
//		return tx.IncrBy(msg.Context(), "wallet:alice", 190).Err()
//	})
//
// # How it works
//
// Claim sends one pipeline of plain commands: SET the key's lease NX GET PX
// Config.Lease to a random token, read the committed key (a hash of time, fingerprint
// and output), and bump a fencing counter (Tx.Fence). A committed key is a duplicate,
// returned with its stored output for Replay; a lease another delivery holds makes the
// caller wait; otherwise the lease is its claim. The lease is set before the key is read,
// and a commit needs the lease, so a key found uncommitted stays so while the lease
// lasts. Commit runs one Lua script that checks the lease, runs the queued commands,
// stores the key (expiring after Config.Retention) and drops the lease. A first delivery
// costs 2 round trips, a duplicate 1, with or without MaxAttempts.
//
// A concurrent duplicate waits without polling: it adds itself to the key's waiters (a
// set, so it counts once however often it waits again), checks again, and blocks
// (BLPOP, holding a pool connection) on the key's release list, which the commit or
// rollback fills with one entry per waiter; a lease that expires (its holder died) ends
// the BLPOP too. It then claims again: a duplicate if the other committed, a claim if it
// rolled back or died. Past Config.Wait it returns inbox.ErrContended and the message
// is nacked.
//
// A handler that outlives Config.Lease loses its claim: another delivery may take the
// key and apply the effects, and then the late commit is refused (if none did, it
// commits). Choose a lease longer than the slowest handler; effects outside Redis may
// otherwise happen twice.
//
// Redis rolls nothing back: a queued command that fails while the commit runs (e.g.
// WRONGTYPE) does not undo the others, and the key is stored with them
// (ErrCommandFailed). Commands are checked against the server's command table first,
// subcommands (XGROUP CREATE, SCRIPT EXISTS, OBJECT ENCODING...) by their own entries,
// so unknown commands, wrong argument counts, commands Redis refuses in scripts, and on
// a Cluster keys outside the claim's slot, are refused before anything runs
// (ErrCommandRefused, ErrCrossSlot); a command whose keys or flags cannot be determined
// is refused, never guessed. The handler's queued commands have no replies: read with
// the client itself (outside the transaction, so not isolated from other writers).
//
// # Attempts (inbox.Config.MaxAttempts)
//
// An attempt is started by the claim pipeline itself, only once the delivery holds the
// lease and the key is not committed: a set of attempt tokens next to the key, which
// expires with the claim, so it never outlives the key. Duplicates and waiting
// duplicates start none. The claim counts the tokens other than its own: deliveries
// that held the key and neither committed nor rolled back (their process died, their
// handler panicked, or they outlived their lease). A commit ends every attempt of the
// key, a rollback its own, in the same script that releases the key, so no waiter
// counts a clean failure in between.
//
// # Every round trip is safe to resend
//
// go-redis sends a command again when the connection broke before it read the reply
// (MaxRetries), and so may a user's retry: every command the store sends gives the
// first run's answer when it ran already. The claim's SET NX GET finds its own token;
// the attempt and the waiter are members of sets; the commit finds its token on the key
// and returns what it did then, failed commands included; the release and EndAttempt
// compare their token before acting; Forget finds its own token; the dedup check finds
// its own token; Stats only reads. A resent BLPOP may lose one wake-up: the waiter then
// claims again when its block ends (at most a second). See ADRs 65-69 in docs/adr.
//
// # Forget
//
// Forget deletes the key, its attempts and its lease, and records itself as the key's
// generation: a delivery in flight claimed before it, so its commit is refused
// (ErrLeaseLost, nothing applied), and the message's next delivery processes it. A user
// who forgets a key wants the message processed again; a commit that started before
// the Forget would store the key again and make that delivery a duplicate.
//
// # Redis Cluster
//
// Every key of one claim carries one hash tag, Config.HashTag (by default the consumer
// and the key), so each pipeline and script touches one slot. The handler's keys must be in that
// slot too: put Tx.Tag() in them, or choose a HashTag that returns the tag the
// handler's keys already carry (e.g. an account ID in the message key). A command with a
// key in another slot is refused at commit with ErrCrossSlot, nothing applied; the
// check is always on with a *redis.ClusterClient, and Config.CheckSlots turns it on
// with a single Redis.
//
// # Batches
//
// The store is an inbox.BatchStore (Inbox.ProcessBatch, inboxkgo): one script takes
// the leases of every key of the batch that is not committed, or none of them when
// another delivery holds one (the claim then waits on that key, as a single claim does,
// and tries again), so two overlapping batches never each hold part of the other's
// keys; one script commits them all with the handler's queued commands. Batches keep
// the guarantees of single messages on the same keys: a batch waiting for a key is one
// of its waiters, woken by any commit, release or Forget of it (and a single delivery
// waiting for a batch's key is woken by the batch); a Forget of a key since the batch's
// claim refuses the batch's commit (ErrLeaseLost, nothing applied); the commit stores
// the commands that failed, ends the keys' attempts, and a resend of any of the three
// scripts gives the first run's answer. A key processed alone is a duplicate in a batch
// and the other way round. A batch counts no attempts: inbox.ProcessBatch refuses an
// Inbox with MaxAttempts (errors.ErrUnsupported). On a Cluster
// all the keys of a batch, and the handler's, must share one slot: set Config.HashTag
// to return one tag for a batch's keys (the partition, the account it is for); a batch
// spanning slots is refused with ErrCrossSlot before anything is claimed. Tx.Fence is
// the fence of the batch's first new key. A Redis that cannot be reached fails a batch
// even with DangerouslyProcessWithoutDedupWhenUnreachable. There is no offset mode
// (inbox.OffsetStore) on Redis.
//
// # Persistence, replication and failover
//
// Deduplication is as durable as Redis: a key lost by a restart without persistence
// (or with appendfsync everysec, the last second) makes its message new again. Use AOF
// with appendfsync always where that matters. Replication is asynchronous: a failover
// to a replica that had not received the last commits loses them, keys and effects
// together, so their redeliveries process them once more on the new primary (the
// effects are not doubled, but effects outside Redis are). Config.Replicas sends WAIT
// with the commit, in the same round trip, and reports the commit only once that many
// replicas have it (ErrNotReplicated otherwise: the message is nacked, and its
// redelivery is a duplicate while the primary lives).
//
// # Redis unreachable
//
// The store fails closed: a claim Redis does not answer is an error wrapping
// ErrUnreachable, and the message is nacked, never processed without deduplication.
// Config.DangerouslyProcessWithoutDedupWhenUnreachable is the opt-in for availability
// over exactly-once: the handler runs without a claim, and each such message is logged
// at error level. Its commit is the same script as any commit, once Redis answers: it
// applies nothing if another delivery committed the key or holds its lease meanwhile.
//
// # Watermill's Deduplicator
//
// NewExpiringKeyRepository is a Redis repository for middleware.Deduplicator, with the
// Deduplicator's semantics (the key is kept even when the handler fails). Give the
// Deduplicator a key factory that tells messages apart (the default hashes the
// payload, so two messages with one body count as one) and a Timeout (Watermill raises
// one below 5ms, the zero value included, to 5ms), which the repository holds even
// with go-redis's default ContextTimeoutEnabled false:
//
//	repo, err := redisstore.NewExpiringKeyRepository(client, redisstore.DedupConfig{Window: 24 * time.Hour})
//	dedup := middleware.Deduplicator{
//		KeyFactory: func(msg *message.Message) (string, error) { return msg.UUID, nil },
//		Repository: repo,
//		Timeout:    time.Second,
//	}
//	router.AddMiddleware(dedup.Middleware)
//
// A check that go-redis resends finds its own token and answers "new" again; a check
// that gave up (the Timeout) is undone once its answer is in, so the nacked message's
// redelivery is checked afresh.
//
// # Against the inbox's conformance suite
//
// The store passes the root package's conformance suite, on a single Redis and on a
// Cluster (its HashTag putting every claim of the test in the ledger's slot), except
// what Redis cannot do,
// declared as capabilities: there is no transaction of the caller's to join (ClaimIn
// returns ErrNoJoin), keys expire by themselves (PurgeBatch is a no-op deleting nothing),
// there are no tables (Verify never returns inbox.ErrNoTable), and a handler cannot
// commit its handle: Exec and Discard only end the transaction, so the inbox refuses
// to commit (inbox.ErrTxDone) and the redelivery processes, where a SQL handler's
// COMMIT takes the key with it. It has no offset mode (noOffsets).
package redisstore
