package inbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// PostgresStore quotes the key into the SQL text of its one-round-trip claim over a
// pool (see PostgresStore). These tests check, against the real server, that what is
// stored is the key byte for byte and that nothing else runs, and that every connection
// goes back to the pool.

// hostileKeys returns keys that would break naive quoting, aimed at the canary table.
func hostileKeys(canary string) []string {
	return []string{
		`plain`,
		`'`, `''`, `'''`, `\`, `\'`, `'\`, `\\'`, `\x41`, `E'\x41'`,
		`$$`, `$tag$'$tag$`, `--`, `/*`, `*/`,
		"line\nbreak", "tab\there", "\r\n'\r\n",
		`"quoted"`, "`backtick`", `;`, `;;`,
		"ünïcødé ☃ 🎉 '", "\u2019 right single quote", "\uff07 fullwidth apostrophe",
		"\u02bc modifier apostrophe", "\u0301 combining", "\u200b zero width",
		"\ufeff BOM", "\U0010ffff",
		strings.Repeat("'", 255), strings.Repeat(`\`, 255),
		"'; DROP TABLE " + canary + "; --",
		"x', NULL); DROP TABLE " + canary + "; INSERT INTO " + canary + " VALUES (2); --",
		"x'::bytea); DELETE FROM " + canary + "; --",
		"\\'); DROP TABLE " + canary + "; --",
		"$$; DROP TABLE " + canary + "; $$",
		"/* '; DROP TABLE " + canary + "; */",
	}
}

// claimAndCheck claims key under a fresh consumer, commits, then checks with bound
// parameters that the stored key is key and that a second claim is a duplicate with the
// stored fingerprint.
func claimAndCheck(t *testing.T, pool *pgxpool.Pool, store *inbox.PostgresStore, table, consumer, key string, fp []byte) {
	t.Helper()
	ctx := context.Background()
	rec := inbox.Record{Consumer: consumer, Key: key, Fingerprint: fp}
	claim, err := store.Claim(ctx, rec)
	require.NoError(t, err)
	require.False(t, claim.Duplicate, "a fresh consumer's key is new")
	require.NoError(t, claim.Tx.Commit(ctx, nil))

	var stored string
	var storedFP []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT key, fingerprint FROM `+pgx.Identifier{table}.Sanitize()+` WHERE consumer = $1`, consumer).Scan(&stored, &storedFP))
	require.Equal(t, []byte(key), []byte(stored), "stored key byte for byte")
	require.Equal(t, fp, storedFP)

	again, err := store.Claim(ctx, rec)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, fp, again.Fingerprint)
	require.Nil(t, again.Output)
}

// quotingSetup returns a store on fresh tables, a second one on the same table with a
// lock timeout (so that the SET LOCAL statements are in the query too), and a canary
// table holding one row, all dropped when the test ends.
func quotingSetup(t testing.TB, pool *pgxpool.Pool) (store, timed *inbox.PostgresStore, table, canary string) {
	t.Helper()
	table = tableName("inbox")
	store = newPgxStore(t, pool, inbox.PostgresConfig{Table: table})
	timed, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table, LockTimeout: 2 * time.Second})
	require.NoError(t, err)
	canary = tableName("canary")
	_, err = pool.Exec(context.Background(), `CREATE TABLE `+canary+` (n int); INSERT INTO `+canary+` VALUES (1)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+canary) })
	return store, timed, table, canary
}

// requireCanary checks that the canary table is there with its one row only.
func requireCanary(t *testing.T, pool *pgxpool.Pool, canary string) {
	t.Helper()
	var ones, others int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n IS DISTINCT FROM 1) FROM `+canary).Scan(&ones, &others),
		"the canary table survived")
	require.Equal(t, 1, ones, "the canary row is there")
	require.Zero(t, others, "nothing else was inserted into the canary table")
}

func TestPostgresStoreQuotesHostileKeys(t *testing.T) {
	t.Parallel()
	for _, scs := range []string{"on", "off"} {
		t.Run("standard_conforming_strings="+scs, func(t *testing.T) {
			t.Parallel()
			cfg, err := pgxpool.ParseConfig(postgresDSN())
			require.NoError(t, err)
			cfg.MaxConns = 2
			// off: the store must not quote, and use bound parameters instead.
			cfg.ConnConfig.RuntimeParams["standard_conforming_strings"] = scs
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err == nil {
				err = pool.Ping(context.Background())
			}
			if err != nil {
				unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
			}
			t.Cleanup(pool.Close)
			store, timed, table, canary := quotingSetup(t, pool)
			keys := hostileKeys(canary)
			for i, key := range keys {
				s := store
				if i%2 == 1 {
					s = timed
				}
				claimAndCheck(t, pool, s, table, fmt.Sprintf("c%d", i), key, []byte(key))
			}
			claimAndCheck(t, pool, store, table, "nil-fingerprint", "k", nil)
			claimAndCheck(t, pool, store, table, "empty-fingerprint", "k", []byte{})
			var rows int
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&rows))
			require.Equal(t, len(keys)+2, rows, "one row per claim, nothing else")
			requireCanary(t, pool, canary)
			require.Zero(t, pool.Stat().AcquiredConns())
		})
	}
}

func FuzzPostgresStoreKeyQuoting(f *testing.F) {
	pool := pgPool(f)
	store, timed, table, canary := quotingSetup(f, pool)
	for _, key := range hostileKeys(canary) {
		f.Add(key, []byte(key))
	}
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, key string, fp []byte) {
		if key == "" || len(key) > inbox.MaxKeyLen || !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
			t.Skip("not a storable key: the middleware hashes it first")
		}
		i := n.Add(1)
		s := store
		if i%2 == 0 {
			s = timed
		}
		claimAndCheck(t, pool, s, table, fmt.Sprintf("fuzz%d", i), key, fp)
		requireCanary(t, pool, canary)
	})
}

// queryLog is a pgx tracer that records the SQL of each query a connection sends.
type queryLog struct{ queries atomic.Pointer[[]string] }

func (l *queryLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	for {
		old := l.queries.Load()
		next := append(append([]string{}, derefStrings(old)...), data.SQL)
		if l.queries.CompareAndSwap(old, &next) {
			return ctx
		}
	}
}

func (l *queryLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *queryLog) take() []string {
	return derefStrings(l.queries.Swap(nil))
}

func derefStrings(p *[]string) []string {
	if p == nil {
		return nil
	}
	return *p
}

// TestPostgresStoreFoldedClaim: over a pool, a new key is claimed in one query (BEGIN
// and INSERT together), and every path gives its connection back to the pool without
// destroying it: commit, commit with output, rollback, duplicate, a handler that ended
// the transaction itself, a missing table.
func TestPostgresStoreFoldedClaim(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(postgresDSN())
	require.NoError(t, err)
	cfg.MaxConns = 2
	log := &queryLog{}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err == nil {
		err = pool.Ping(context.Background())
	}
	if err != nil {
		unavailable(t, "PostgreSQL", "INBOX_POSTGRES_DSN", err)
	}
	t.Cleanup(pool.Close)
	table := tableName("inbox")
	store := newPgxStore(t, pool, inbox.PostgresConfig{Table: table})
	missing, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: tableName("missing")})
	require.NoError(t, err)
	ctx := context.Background()
	log.take()

	claim, err := store.Claim(ctx, inbox.Record{Consumer: "c", Key: "one-query"})
	require.NoError(t, err)
	queries := log.take()
	require.Len(t, queries, 1, "the claim is one query: %q", queries)
	require.Contains(t, queries[0], "INSERT INTO")
	require.NoError(t, claim.Tx.Commit(ctx, nil))

	newConns := pool.Stat().NewConnsCount()
	for i := range 30 {
		key := fmt.Sprintf("k%d", i%10) // from the 11th on, duplicates
		claim, err := store.Claim(ctx, inbox.Record{Consumer: "c", Key: key, Fingerprint: []byte{byte(i)}})
		require.NoError(t, err)
		if i >= 10 {
			require.True(t, claim.Duplicate, key)
			require.Equal(t, []byte{byte(i % 10)}, claim.Fingerprint)
			require.Equal(t, []byte("out"), claim.Output)
			continue
		}
		require.False(t, claim.Duplicate, key)
		switch i % 3 {
		case 0:
			require.NoError(t, claim.Tx.Commit(ctx, []byte("out")))
		case 1: // rolled back, then claimed again and committed
			require.NoError(t, claim.Tx.Rollback(ctx))
			again, err := store.Claim(ctx, inbox.Record{Consumer: "c", Key: key, Fingerprint: []byte{byte(i)}})
			require.NoError(t, err)
			require.False(t, again.Duplicate)
			require.NoError(t, again.Tx.Commit(ctx, []byte("out")))
		case 2: // the handler commits behind the inbox's back, with the output
			tx := claim.Tx.Handle().(pgx.Tx)
			_, err := tx.Exec(ctx, `UPDATE `+pgx.Identifier{table}.Sanitize()+` SET output = 'out' WHERE consumer = 'c' AND key = $1`, key)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			require.ErrorIs(t, claim.Tx.Commit(ctx, nil), inbox.ErrTxDone)
			require.NoError(t, claim.Tx.Rollback(ctx))
		}
		_, err = missing.Claim(ctx, inbox.Record{Consumer: "c", Key: key})
		require.ErrorIs(t, err, inbox.ErrNoTable)
	}
	stat := pool.Stat()
	require.Zero(t, stat.AcquiredConns(), "every connection went back to the pool")
	require.Equal(t, newConns, stat.NewConnsCount(), "no connection was destroyed and replaced")
}
