package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// purgeFixture is an inbox on a fresh PostgreSQL table, with helpers to make keys old.
type purgeFixture struct {
	pool  *pgxpool.Pool
	table string
	store *inbox.PostgresStore
	ib    *inbox.Inbox
}

func newPurgeFixture(t *testing.T) purgeFixture {
	t.Helper()
	pool := pgPool(t)
	table := tableName("purge")
	store := newPgxStore(t, pool, inbox.PostgresConfig{Table: table})
	ib, err := inbox.New(inbox.Config{Store: store, MaxAttempts: 3})
	require.NoError(t, err)
	return purgeFixture{pool: pool, table: table, store: store, ib: ib}
}

// process processes keys key-0..key-(n-1) of consumer, each once.
func (f purgeFixture) process(t *testing.T, consumer string, n int) {
	t.Helper()
	for i := range n {
		dup, err := f.ib.Process(context.Background(), consumer, fmt.Sprintf("key-%d", i), func(context.Context) error { return nil })
		require.NoError(t, err)
		require.False(t, dup)
	}
}

// age makes every key of consumer (and its attempt count) look processed age ago.
func (f purgeFixture) age(t *testing.T, consumer string, age time.Duration) {
	t.Helper()
	ctx := context.Background()
	_, err := f.pool.Exec(ctx, `UPDATE `+pgx.Identifier{f.table}.Sanitize()+` SET processed_at = now() - $2::interval WHERE consumer = $1`, consumer, age)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE `+pgx.Identifier{f.table + "_attempts"}.Sanitize()+` SET started_at = now() - $2::interval WHERE consumer = $1`, consumer, age)
	require.NoError(t, err)
}

// keys returns the number of keys per consumer.
func (f purgeFixture) keys(t *testing.T) map[string]int64 {
	t.Helper()
	stats, err := f.store.Stats(context.Background())
	require.NoError(t, err)
	got := map[string]int64{}
	for _, s := range stats {
		got[s.Consumer] = s.Keys
	}
	return got
}

func (f purgeFixture) attempts(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{f.table + "_attempts"}.Sanitize()).Scan(&n))
	return n
}

// batchRecorder is the real store, recording what each PurgeBatch call deleted.
type batchRecorder struct {
	inbox.Store
	mu      sync.Mutex
	limits  []int
	batches []int64
}

func (r *batchRecorder) PurgeBatch(ctx context.Context, before time.Time, limit int) (inbox.Purged, error) {
	n, err := r.Store.PurgeBatch(ctx, before, limit)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.limits = append(r.limits, limit)
	r.batches = append(r.batches, n.Keys)
	return n, err
}

func TestPurge_DeletesOldKeysInBoundedBatches(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	f.process(t, "old", 25)
	f.process(t, "new", 3)
	require.Zero(t, f.attempts(t), "a committed attempt leaves no row")
	for i := range 3 { // attempts that crashed: rows that stay until a purge
		crashedAttempt(t, context.Background(), f.store, "old", fmt.Sprint("crashed-", i))
		crashedAttempt(t, context.Background(), f.store, "new", fmt.Sprint("crashed-", i))
	}
	f.age(t, "old", 40*24*time.Hour)

	rec := &batchRecorder{Store: f.store}
	var progress []int64
	n, err := inbox.Purge(context.Background(), rec, inbox.PurgeConfig{
		OlderThan: 30 * 24 * time.Hour,
		BatchSize: 10,
		Pause:     time.Millisecond,
		Progress:  func(deleted int64) { progress = append(progress, deleted) },
	})
	require.NoError(t, err)
	require.Equal(t, int64(25), n)
	require.Equal(t, []int64{10, 10, 5}, rec.batches, "each batch deletes at most BatchSize keys")
	require.Equal(t, []int{10, 10, 10}, rec.limits)
	require.Equal(t, []int64{10, 20, 25}, progress)
	require.Equal(t, map[string]int64{"new": 3}, f.keys(t), "keys younger than the cutoff stay")
	require.Equal(t, 3, f.attempts(t), "attempt rows older than the cutoff go with the keys")
}

func TestPurge_Guardrail(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	f.process(t, "c", 2)
	f.age(t, "c", 2*time.Hour)

	refusals := []struct {
		name    string
		cfg     inbox.PurgeConfig
		wantMsg string
	}{
		{name: "younger than the default minimum retention", cfg: inbox.PurgeConfig{OlderThan: time.Hour}, wantMsg: "refusing to purge keys younger than 1h0m0s"},
		{name: "younger than the configured minimum retention", cfg: inbox.PurgeConfig{OlderThan: 10 * 24 * time.Hour, MinRetention: 14 * 24 * time.Hour}, wantMsg: "(336h0m0s)"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			n, err := inbox.Purge(context.Background(), f.store, tt.cfg)
			require.ErrorIs(t, err, inbox.ErrRetention)
			require.ErrorContains(t, err, tt.wantMsg)
			require.ErrorContains(t, err, "set Force")
			require.Zero(t, n)
			require.Equal(t, map[string]int64{"c": 2}, f.keys(t), "a refused purge deletes nothing")
		})
	}

	invalid := []struct {
		name    string
		cfg     inbox.PurgeConfig
		wantMsg string
	}{
		{name: "no age", cfg: inbox.PurgeConfig{}, wantMsg: "OlderThan is 0s"},
		{name: "negative batch", cfg: inbox.PurgeConfig{OlderThan: 800 * time.Hour, BatchSize: -1}, wantMsg: "BatchSize is -1"},
		{name: "negative pause", cfg: inbox.PurgeConfig{OlderThan: 800 * time.Hour, Pause: -time.Second}, wantMsg: "Pause is -1s"},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			_, err := inbox.Purge(context.Background(), f.store, tt.cfg)
			require.ErrorContains(t, err, "inbox: invalid purge config")
			require.ErrorContains(t, err, tt.wantMsg)
			require.NotErrorIs(t, err, inbox.ErrRetention)
		})
	}

	t.Run("forced", func(t *testing.T) {
		n, err := inbox.Purge(context.Background(), f.store, inbox.PurgeConfig{OlderThan: time.Hour, Force: true})
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		require.Empty(t, f.keys(t))
	})
}

func TestPurge_PurgedKeyMakesTheNextDeliveryNew(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	led := newPgLedger(t, f.pool)
	credit := func(ctx context.Context) error { return led.credit(ctx, 5) }

	dup, err := f.ib.Process(context.Background(), "payments", "order-1", credit)
	require.NoError(t, err)
	require.False(t, dup)
	dup, err = f.ib.Process(context.Background(), "payments", "order-1", credit)
	require.NoError(t, err)
	require.True(t, dup, "before the purge, a redelivery is a duplicate")

	f.age(t, "payments", 31*24*time.Hour)
	n, err := inbox.Purge(context.Background(), f.store, inbox.PurgeConfig{OlderThan: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	dup, err = f.ib.Process(context.Background(), "payments", "order-1", credit)
	require.NoError(t, err)
	require.False(t, dup, "after the purge, the same message is new again")
	total, credits := led.balance(t)
	require.Equal(t, 10, total)
	require.Equal(t, 2, credits)
}

func TestPurgeEvery_PurgesUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	f.process(t, "c", 7)
	f.age(t, "c", 40*24*time.Hour)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runs := make(chan int64, 100)
	done := make(chan error, 1)
	go func() {
		done <- inbox.PurgeEvery(ctx, f.store, 20*time.Millisecond, inbox.PurgeConfig{
			OlderThan: 30 * 24 * time.Hour,
			BatchSize: 5,
			Progress: func(deleted int64) {
				select {
				case runs <- deleted:
				default:
				}
			},
		})
	}()

	// The first run deletes 5 then 2; later runs find nothing.
	require.Equal(t, int64(5), <-runs)
	require.Equal(t, int64(7), <-runs)
	require.Equal(t, int64(0), <-runs, "the runner purges again on its interval")
	require.Empty(t, f.keys(t))

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("PurgeEvery did not return after its context ended")
	}
}

func TestPurgeEvery_RejectsAnInvalidConfigAtOnce(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	tests := []struct {
		name     string
		interval time.Duration
		cfg      inbox.PurgeConfig
		want     string
	}{
		{name: "no interval", interval: 0, cfg: inbox.PurgeConfig{OlderThan: 800 * time.Hour}, want: "invalid purge interval 0s"},
		{name: "guardrail", interval: time.Hour, cfg: inbox.PurgeConfig{OlderThan: time.Hour}, want: "refusing to purge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := inbox.PurgeEvery(context.Background(), f.store, tt.interval, tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// purgeStore is one store under TestPurge_EveryStore, with a way to age its keys.
type purgeStore struct {
	name string
	open func(t *testing.T) (inbox.Store, func(t *testing.T, consumer string, days int))
}

func purgeStores() []purgeStore {
	mysqlLike := func(db func(testing.TB) *sql.DB) func(t *testing.T) (inbox.Store, func(*testing.T, string, int)) {
		return func(t *testing.T) (inbox.Store, func(*testing.T, string, int)) {
			conn := db(t)
			table := tableName("purge")
			store := newMySQLStore(t, conn, inbox.MySQLConfig{Table: table})
			return store, func(t *testing.T, consumer string, days int) {
				for _, q := range []string{
					"UPDATE `" + table + "` SET `processed_at` = `processed_at` - INTERVAL ? DAY WHERE `consumer` = ?",
					"UPDATE `" + table + "_attempts` SET `started_at` = `started_at` - INTERVAL ? DAY WHERE `consumer` = ?",
				} {
					_, err := conn.Exec(q, days, consumer)
					require.NoError(t, err)
				}
			}
		}
	}
	return []purgeStore{
		{name: "sqlpostgres", open: func(t *testing.T) (inbox.Store, func(*testing.T, string, int)) {
			conn := sqlPostgresDB(t)
			table := tableName("purge")
			store := newSQLPostgresStore(t, conn, inbox.SQLPostgresConfig{Table: table})
			return store, func(t *testing.T, consumer string, days int) {
				for _, tbl := range []string{table, table + "_attempts"} {
					col := "processed_at"
					if tbl != table {
						col = "started_at"
					}
					_, err := conn.Exec(fmt.Sprintf(`UPDATE %q SET %s = %s - make_interval(days => $1) WHERE consumer = $2`, tbl, col, col), days, consumer)
					require.NoError(t, err)
				}
			}
		}},
		{name: "mariadb", open: mysqlLike(mariaDB)},
		{name: "mysql", open: mysqlLike(mysqlDB)},
	}
}

// Purge is built on Store.PurgeBatch only, so it works, in bounded batches, on every store.
func TestPurge_EveryStore(t *testing.T) {
	t.Parallel()
	for _, s := range purgeStores() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			store, age := s.open(t)
			ib, err := inbox.New(inbox.Config{Store: store, MaxAttempts: 3})
			require.NoError(t, err)
			for _, c := range []struct {
				consumer string
				n        int
			}{{"old", 12}, {"new", 2}} {
				for i := range c.n {
					_, err := ib.Process(context.Background(), c.consumer, fmt.Sprintf("key-%d", i), func(context.Context) error { return nil })
					require.NoError(t, err)
				}
			}
			age(t, "old", 40)

			rec := &batchRecorder{Store: store}
			n, err := inbox.Purge(context.Background(), rec, inbox.PurgeConfig{OlderThan: 30 * 24 * time.Hour, BatchSize: 5})
			require.NoError(t, err)
			require.Equal(t, int64(12), n)
			require.Equal(t, []int64{5, 5, 2}, rec.batches)

			stats, err := store.Stats(context.Background())
			require.NoError(t, err)
			require.Len(t, stats, 1)
			require.Equal(t, "new", stats[0].Consumer)
			require.Equal(t, int64(2), stats[0].Keys)

			dup, err := ib.Process(context.Background(), "old", "key-0", func(context.Context) error { return nil })
			require.NoError(t, err)
			require.False(t, dup, "a purged key makes the next delivery new again")
		})
	}
}
