package inbox_test

import (
	"context"
	"crypto/sha1"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
	"github.com/watermill-inbox/inbox/redisstore"
)

// What the flavours declare for the fault axis (conformance_faults_test.go): a fixture
// opened with storeOpts.faults dials every connection of its store, and of its peers,
// through a netfault.Injector, and names the commands of each step of a delivery.

// faultStep is a step of a delivery where the fault axis breaks a connection.
type faultStep string

const (
	stepClaim        faultStep = "claim"         // the key's INSERT; the lease's SET on Redis
	stepHandler      faultStep = "handler"       // the handler's statement (Redis queues it for the commit)
	stepOutput       faultStep = "output"        // the stored output's UPDATE (Redis stores it in the commit)
	stepCommit       faultStep = "commit"        // the claim's COMMIT; the commit script on Redis
	stepAttemptStart faultStep = "attempt-start" // MaxAttempts: the start's write, committed
	stepAttemptEnd   faultStep = "attempt-end"   // MaxAttempts: a clean end's write
	stepDedup        faultStep = "dedup"         // the Deduplicator repository's check
	// stepReadStored is the read of a committed key's stored row: before the claim for a
	// remembered or hinted key (ContextWithReplayHint), else the duplicate's read in the
	// claim: over a store that cannot read before it (redialStore, which hides the
	// unexported method), the hint is ignored and the claim reads.
	stepReadStored faultStep = "read-stored"
	// stepPurge is a purge batch's DELETE of keys (in a purge turn: inbox.PurgeTurns).
	stepPurge faultStep = "purge"
)

// netFaults is how a fixture's connections are broken.
type netFaults struct {
	inj *netfault.Injector
	// steps are the commands of the steps the store has; a step it lacks is absent.
	steps map[faultStep]netfault.Step
	// dedup returns the store's middleware.ExpiringKeyRepository for Watermill's
	// Deduplicator, on the injector's connections (stepDedup); nil when it has none.
	dedup func(t *testing.T) middleware.ExpiringKeyRepository
}

// newNetFaults returns the injector of a fixture opened with opts, nil without faults.
func newNetFaults(opts storeOpts, p netfault.Protocol) *netFaults {
	if !opts.faults {
		return nil
	}
	return &netFaults{inj: netfault.New(p)}
}

// dialFunc is net.Dialer's DialContext, which pgx, go-sql-driver and go-redis take.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// dial returns the injector's dialer, nil for a fixture without faults.
func (nf *netFaults) dial() dialFunc {
	if nf == nil {
		return nil
	}
	return nf.inj.DialContext
}

// pgFaultSteps are the steps of the PostgreSQL stores (pgx and database/sql) on table,
// whose handler inserts into ledger (both quoted, qualified by their schema when they
// have one).
//
// The attempt's start (MaxAttempts) is an INSERT into <table>_attempts that first takes
// the attempt's session lock (ADR 60). On pgx over a pool or one connection it is folded
// into the claim's simple query ("BEGIN; ... INSERT attempt ...; COMMIT; BEGIN; INSERT
// key"): there attempt-start strikes on the same round trip as the claim, after the
// reply when both ran, before sending when neither did; it is no separate round trip,
// and the axis runs it all the same, so that a flavour where it is separate (a session
// whose settings refuse the folded claim, database/sql) gets it. A clean end deletes the
// row before it unlocks (a rollback's pipeline on pgx, a statement of its own on
// database/sql): attempt-end is that DELETE. A commit deletes the row in the key's
// transaction, before the COMMIT. read-stored is the stored row's SELECT: a query of its
// own before the claim, or, in pgx's folded claim, the last statement of the duplicate's
// "ROLLBACK; ...; SELECT encode(...)" round trip.
func pgFaultSteps(t, ledger string) map[faultStep]netfault.Step {
	a := strings.TrimSuffix(t, `"`) + `_attempts"`
	claim := netfault.Contains("INSERT INTO " + t + " (")
	return map[faultStep]netfault.Step{
		stepClaim:        {Match: claim},
		stepHandler:      {Match: netfault.Contains("INSERT INTO " + ledger + " (")},
		stepOutput:       {Match: netfault.Contains("UPDATE " + t + " SET output")},
		stepCommit:       {Match: statement("commit"), After: claim},
		stepAttemptStart: {Match: netfault.Contains("INSERT INTO " + a + " (")},
		stepAttemptEnd:   {Match: netfault.Contains("DELETE FROM " + a + " WHERE")},
		stepPurge:        {Match: netfault.Contains("DELETE FROM " + t + " WHERE ctid IN")},
		stepReadStored: {Match: anyOf(
			netfault.Contains("SELECT fingerprint, output FROM "+t+" WHERE"),
			netfault.Contains("SELECT encode(fingerprint, 'hex'), encode(output, 'hex') FROM "+t+" WHERE"),
		)},
	}
}

// anyOf matches a command that one of ms matches.
func anyOf(ms ...netfault.Match) netfault.Match {
	return func(c string) bool {
		for _, m := range ms {
			if m(c) {
				return true
			}
		}
		return false
	}
}

// statement matches a command that is stmt (ignoring case and surrounding space), or
// that holds it as one of its ';'-separated statements: pgx in simple_protocol mode
// sends a batch as one query ("UPDATE ... output; DELETE ...; commit; SELECT
// pg_advisory_unlock(...)"), where the output, the attempt's end and the COMMIT are one
// round trip.
func statement(stmt string) netfault.Match {
	return func(c string) bool {
		for _, s := range strings.Split(c, ";") {
			if strings.EqualFold(strings.TrimSpace(s), stmt) {
				return true
			}
		}
		return false
	}
}

// pgFaultTable is a PostgreSQL table's quoted name, as the stores write it.
func pgFaultTable(schema, table string) string {
	if schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

// mysqlFaultSteps are the steps of MySQLStore on table, whose handler inserts into
// ledger (quoted).
//
// The attempt's start is one statement, autocommitted, on the connection that then
// claims: an INSERT into <table>_attempts whose WHERE takes the attempt's named lock
// (MariaDB, MySQL), or the same INSERT after a SELECT GET_LOCK of its own (Vitess, TiDB);
// attempt-start is that INSERT. A clean end deletes the row, then releases the lock:
// attempt-end is the DELETE.
func mysqlFaultSteps(table, ledger string) map[faultStep]netfault.Step {
	t := "`" + table + "`"
	a := "`" + table + "_attempts`"
	claim := netfault.Contains("INSERT INTO " + t + " (")
	return map[faultStep]netfault.Step{
		stepClaim:        {Match: claim},
		stepHandler:      {Match: netfault.Contains("INSERT INTO " + ledger + " (")},
		stepOutput:       {Match: netfault.Contains("UPDATE " + t + " SET `output`")},
		stepCommit:       {Match: netfault.Equal("COMMIT"), After: claim},
		stepAttemptStart: {Match: netfault.Contains("INSERT INTO " + a + " (")},
		stepAttemptEnd:   {Match: netfault.Contains("DELETE FROM " + a + " WHERE")},
		stepReadStored:   {Match: netfault.Contains("SELECT `fingerprint`, `output` FROM " + t + " WHERE")},
		stepPurge:        {Match: netfault.Contains("DELETE FROM " + t + " WHERE")},
	}
}

// redisFaultSteps are the steps of a redisstore.Store under prefix, and of an
// ExpiringKeyRepository under dedupPrefix (none when it is empty). The handler's
// commands and the output go in the commit script: those steps are the commit's.
//
// The attempt's start is start.lua, sent in the claim's pipeline after the lease's SET
// (one round trip with the claim, its own command and reply). A clean end is
// release.lua with the attempt's token as its last argument (a panic's Abandon sends ""
// there, and leaves the attempt unfinished); EndAttempt's end.lua runs only when an end
// is uncertain, and is matched too.
func redisFaultSteps(t testing.TB, prefix, dedupPrefix string) map[faultStep]netfault.Step {
	evalsha := func(script string) string { return "evalsha " + redisScriptSHA(t, script) + " " }
	release, end := evalsha("release.lua"), evalsha("end.lua")
	steps := map[faultStep]netfault.Step{
		stepClaim:        {Match: netfault.HasPrefix("set " + prefix + "l:")},
		stepCommit:       {Match: netfault.HasPrefix(evalsha("commit.lua"))},
		stepAttemptStart: {Match: netfault.HasPrefix(evalsha("start.lua") + "3 " + prefix + "s:")},
		stepAttemptEnd: {Match: func(c string) bool {
			return strings.HasPrefix(c, release+"4 "+prefix+"l:") && !strings.HasSuffix(c, " ") ||
				strings.HasPrefix(c, end+"4 "+prefix+"s:")
		}},
	}
	if dedupPrefix != "" {
		steps[stepDedup] = netfault.Step{Match: netfault.HasPrefix(evalsha("dedup.lua") + "1 " + dedupPrefix)}
	}
	return steps
}

// forRedis declares the steps of a Redis flavour's store under prefix, on client, and
// its Deduplicator repository; nothing for a fixture without faults.
func (nf *netFaults) forRedis(t testing.TB, client redis.UniversalClient, prefix string) {
	if nf == nil {
		return
	}
	dedupPrefix := prefix + "dedup:"
	nf.steps = redisFaultSteps(t, prefix, dedupPrefix)
	nf.dedup = func(t *testing.T) middleware.ExpiringKeyRepository {
		repo, err := redisstore.NewExpiringKeyRepository(client, redisstore.DedupConfig{Window: time.Hour, Prefix: dedupPrefix})
		require.NoError(t, err)
		return repo
	}
}

// redisScriptSHA is the SHA1 Redis knows one of redisstore's scripts by, from its source.
func redisScriptSHA(t testing.TB, name string) string {
	src, err := os.ReadFile("redisstore/lua/" + name)
	require.NoError(t, err)
	sum := sha1.Sum(src)
	return hex.EncodeToString(sum[:])
}

var mysqlDialName atomic.Int64

// mysqlDialDSN returns dsn (go-sql-driver's) dialling through dial, registered under a
// network name of its own.
func mysqlDialDSN(t testing.TB, dsn string, dial dialFunc) string {
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.Net = fmt.Sprint("netfault-", mysqlDialName.Add(1))
	mysql.RegisterDialContext(cfg.Net, func(ctx context.Context, addr string) (net.Conn, error) {
		return dial(ctx, "tcp", addr)
	})
	return cfg.FormatDSN()
}

// pgxDialDSN returns a DSN of pgx's database/sql driver for dsn dialling through dial,
// unregistered when the test ends.
func pgxDialDSN(t testing.TB, dsn string, dial dialFunc) string {
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.DialFunc = dial
	name := stdlib.RegisterConnConfig(cfg)
	t.Cleanup(func() { stdlib.UnregisterConnConfig(name) })
	return name
}

// redialStore is a store on one connection (*pgx.Conn, *sql.Conn) that the application
// opens again before a call once a fault broke it, as a pool does for its connections:
// a broken single connection is never usable again.
type redialStore struct {
	open func() (inbox.Store, func() bool) // a store on a new connection, and whether that connection died

	mu      sync.Mutex
	cur     inbox.Store
	dead    func() bool
	redials int
}

var _ inbox.Store = (*redialStore)(nil)

func newRedialStore(open func() (inbox.Store, func() bool)) *redialStore {
	s := &redialStore{open: open}
	s.cur, s.dead = open()
	return s
}

func (s *redialStore) store() inbox.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead() {
		s.cur, s.dead = s.open()
		s.redials++
	}
	return s.cur
}

func (s *redialStore) Claim(ctx context.Context, rec inbox.Record) (inbox.Claim, error) {
	return s.store().Claim(ctx, rec)
}

func (s *redialStore) ClaimIn(ctx context.Context, tx any, rec inbox.Record) (inbox.Claim, error) {
	return s.store().ClaimIn(ctx, tx, rec)
}

func (s *redialStore) EndAttempt(ctx context.Context, rec inbox.Record) error {
	return s.store().EndAttempt(ctx, rec)
}

func (s *redialStore) Forget(ctx context.Context, consumer, key string) (bool, error) {
	return s.store().Forget(ctx, consumer, key)
}

// TakePurgeTurn implements inbox.PurgeTurns on the current connection's store.
func (s *redialStore) TakePurgeTurn(ctx context.Context, idle time.Duration) (inbox.PurgeTurn, error) {
	turns, ok := s.store().(inbox.PurgeTurns)
	if !ok {
		return nil, fmt.Errorf("%w: no purge turns", errors.ErrUnsupported)
	}
	return turns.TakePurgeTurn(ctx, idle)
}

func (s *redialStore) PurgeBatch(ctx context.Context, before time.Time, limit int) (inbox.Purged, error) {
	return s.store().PurgeBatch(ctx, before, limit)
}

func (s *redialStore) Stats(ctx context.Context) ([]inbox.ConsumerStats, error) {
	return s.store().Stats(ctx)
}

func (s *redialStore) Verify(ctx context.Context) error { return s.store().Verify(ctx) }

// sqlConnDead reports whether conn's driver connection is closed (broken): what
// go-sql-driver says through driver.Validator, and pgx's stdlib driver, which does not
// implement it, through its *pgx.Conn.
func sqlConnDead(conn *sql.Conn) bool {
	err := conn.Raw(func(dc any) error {
		switch dc := dc.(type) {
		case driver.Validator:
			if !dc.IsValid() {
				return driver.ErrBadConn
			}
		case interface{ Conn() *pgx.Conn }:
			if dc.Conn().IsClosed() {
				return driver.ErrBadConn
			}
		}
		return nil
	})
	return err != nil
}
