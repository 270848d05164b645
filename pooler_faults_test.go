package inbox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
)

// The pooler probe under the fault axis: a connection broken at each of the probe's
// queries, before the server ran it or after, fails New with an error, and never passes
// a handle that the probe, had it finished, would have refused. The next New probes
// again and gives the answer it gives without a fault: refused through PgBouncer in
// transaction mode, accepted on PostgreSQL directly.
func TestPoolerProbeUnderFaults(t *testing.T) {
	t.Parallel()
	table := tableName("inbox")
	newPgxStore(t, pgPool(t), inbox.PostgresConfig{Table: table})
	pid := netfault.Equal("SELECT pg_backend_pid()")
	steps := []struct {
		name     string
		match    func() netfault.Match
		directly bool // the step also runs on PostgreSQL directly
	}{
		{"first-pid", func() netfault.Match { return pid }, true},
		{"held-pid", func() netfault.Match { return netfault.HasPrefix("BEGIN; SELECT pg_backend_pid()") }, false},
		{"next-pid", func() netfault.Match { return nth(2, pid) }, false},
	}
	checks := []struct {
		name     string
		mode     string // pgx's default_query_exec_mode
		attempts int
		refused  error
	}{
		{"statement-cache", "cache_statement", 0, inbox.ErrStatementCache},
		{"max-attempts", "exec", 3, inbox.ErrAttemptsBehindPooler},
	}
	handles := []struct {
		name string
		open func(t *testing.T, dsn string, in *netfault.Injector) inbox.Store
	}{
		{"pgxpool", func(t *testing.T, dsn string, in *netfault.Injector) inbox.Store {
			cfg, err := pgxpool.ParseConfig(dsn)
			require.NoError(t, err)
			cfg.ConnConfig.DialFunc = in.DialContext
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table})
			require.NoError(t, err)
			return store
		}},
		{"database-sql", func(t *testing.T, dsn string, in *netfault.Injector) inbox.Store {
			cfg, err := pgx.ParseConfig(dsn)
			require.NoError(t, err)
			cfg.DialFunc = in.DialContext
			db := stdlib.OpenDB(*cfg)
			t.Cleanup(func() { _ = db.Close() })
			store, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Table: table})
			require.NoError(t, err)
			return store
		}},
	}
	targets := []struct {
		name     string
		dsn      func(t *testing.T, mode string) string
		directly bool
	}{
		{"pgbouncer", func(t *testing.T, mode string) string {
			return pgbouncerDSN(t, map[string]string{"default_query_exec_mode": mode})
		}, false},
		{"postgres", func(t *testing.T, mode string) string {
			return dsnWith(t, postgresDSN(), map[string]string{"default_query_exec_mode": mode})
		}, true},
	}
	for _, target := range targets {
		for _, check := range checks {
			for _, h := range handles {
				for _, step := range steps {
					if target.directly && !step.directly {
						continue // a direct connection answers at its first query
					}
					for _, mode := range []netfault.Mode{netfault.BeforeSend, netfault.AfterReply} {
						name := strings.Join([]string{target.name, check.name, h.name, step.name, mode.String()}, "/")
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							in := netfault.New(netfault.Postgres)
							store := h.open(t, target.dsn(t, check.mode), in)
							cfg := inbox.Config{Store: store, Consumer: "billing", MaxAttempts: check.attempts}
							fault := in.Arm(netfault.Step{Match: step.match()}, mode)
							_, err := inbox.New(cfg)
							require.True(t, fault.HasFired(), "the fault struck %s", step.name)
							require.Error(t, err, "a probe cut short passes nothing")
							require.NotErrorIs(t, err, check.refused, "the probe did not finish")
							require.False(t, inbox.Permanent(err), "a broken connection is transient: %v", err)
							require.Equal(t, 1, strings.Count(err.Error(), "inbox:"), "%v", err)
							require.ErrorContains(t, err, "the next try checks again", "whether retrying helps")
							require.NotContains(t, err.Error(), "invalid config", "the config is fine")
							_, err = inbox.New(cfg)
							if target.directly {
								require.NoError(t, err, "the probe ran again")
							} else {
								require.ErrorIs(t, err, check.refused, "the probe ran again")
							}
							require.NoError(t, in.Err())
						})
					}
				}
			}
		}
	}
}

// nth matches the n-th command m matches, counting from 1.
func nth(n int32, m netfault.Match) netfault.Match {
	var seen atomic.Int32
	return func(c string) bool { return m(c) && seen.Add(1) == n }
}
