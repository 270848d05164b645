package inbox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/netfault"
)

// The pooler probe under the fault axis: a connection broken at each of the probe's
// queries, before the server ran it or after, fails the call that probed (New, or the
// claim of a tenant's store, which New never saw) with an error that says nothing was
// decided, transient, and never passes a handle that the probe, had it finished, would
// have refused. The next call probes again and gives the answer it gives without a
// fault: refused through PgBouncer in transaction mode, accepted on PostgreSQL directly
// (with the suite's non-default lock_timeout). On a single connection (*pgx.Conn,
// *sql.Conn) whose own connection the fault broke, the application opens another, as it
// must after any broken connection, and the next call is made on that.
func TestPoolerProbeUnderFaults(t *testing.T) {
	t.Parallel()
	table := tableName("inbox")
	newPgxStore(t, pgPool(t), inbox.PostgresConfig{Table: table})
	pid := netfault.Equal("SELECT pg_backend_pid()")
	steps := []struct {
		name     string
		match    func() netfault.Match // a new one per case: nth counts
		own      bool                  // the store's own connection breaks (the probe's second one otherwise)
		directly bool                  // the step also runs on PostgreSQL directly, which answers at the first query
	}{
		{"first-pid", func() netfault.Match { return pid }, true, true},
		{"held-pid", func() netfault.Match { return netfault.HasPrefix("BEGIN; SELECT pg_backend_pid()") }, false, false},
		{"next-pid", func() netfault.Match { return nth(2, pid) }, true, false},
	}
	// Each check returns the call that probes, on store.
	newInbox := func(maxAttempts int) func(t *testing.T, store inbox.Store, key string) func() error {
		return func(t *testing.T, store inbox.Store, key string) func() error {
			return func() error {
				_, err := inbox.New(inbox.Config{Store: store, Consumer: "billing", MaxAttempts: maxAttempts})
				return err
			}
		}
	}
	checks := []struct {
		name    string
		mode    string // pgx's default_query_exec_mode
		refused error
		call    func(t *testing.T, store inbox.Store, key string) func() error
	}{
		{"statement-cache", "cache_statement", inbox.ErrStatementCache, newInbox(0)},
		{"max-attempts", "exec", inbox.ErrAttemptsBehindPooler, newInbox(3)},
		{"max-attempts-second-tenant", "exec", inbox.ErrAttemptsBehindPooler, func(t *testing.T, store inbox.Store, key string) func() error {
			return secondTenantProcess(t, table, store, key)
		}},
	}
	handles := []struct {
		name   string
		single bool
		open   func(t *testing.T, dsn string, dial dialFunc) inbox.Store
	}{
		{"pgxpool", false, func(t *testing.T, dsn string, dial dialFunc) inbox.Store {
			return pgStoreOn(t, pgPoolDial(t, dsn, dial), table)
		}},
		{"pgx-conn", true, func(t *testing.T, dsn string, dial dialFunc) inbox.Store {
			return pgStoreOn(t, pgConnDial(t, dsn, dial), table)
		}},
		{"database-sql", false, func(t *testing.T, dsn string, dial dialFunc) inbox.Store {
			return sqlPgStoreOn(t, openSQL(t, "pgx", pgxDialDSN(t, dsn, dial), "PostgreSQL", "INBOX_POSTGRES_DSN"), table)
		}},
		{"sql-conn", true, func(t *testing.T, dsn string, dial dialFunc) inbox.Store {
			conn, err := openSQL(t, "pgx", pgxDialDSN(t, dsn, dial), "PostgreSQL", "INBOX_POSTGRES_DSN").Conn(context.Background())
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			return sqlPgStoreOn(t, conn, table)
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
			return pgDSN(t, map[string]string{"default_query_exec_mode": mode})
		}, true},
	}
	for _, target := range targets {
		for _, check := range checks {
			for _, h := range handles {
				for _, step := range steps {
					if target.directly && !step.directly {
						continue
					}
					for _, mode := range []netfault.Mode{netfault.BeforeSend, netfault.AfterReply} {
						name := strings.Join([]string{target.name, check.name, h.name, step.name, mode.String()}, "/")
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							in := netfault.New(netfault.Postgres)
							dsn := target.dsn(t, check.mode)
							call := check.call(t, h.open(t, dsn, in.DialContext), name)
							fault := in.Arm(netfault.Step{Match: step.match()}, mode)
							err := call()
							require.True(t, fault.HasFired(), "the fault struck %s", step.name)
							require.Error(t, err, "a probe cut short passes nothing")
							require.NotErrorIs(t, err, check.refused, "the probe did not finish")
							require.False(t, inbox.Permanent(err), "a broken connection is transient: %v", err)
							require.Equal(t, 1, strings.Count(err.Error(), "inbox:"), "%v", err)
							require.ErrorContains(t, err, "the next try checks again", "whether retrying helps")
							require.NotContains(t, err.Error(), "invalid config", "the config is fine")
							if h.single && step.own { // the application's next connection
								call = check.call(t, h.open(t, dsn, in.DialContext), name)
							}
							err = call()
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

// secondTenantProcess returns a Process of key, with MaxAttempts, in the second tenant of
// a TenantStore whose first tenant is on PostgreSQL directly and whose second is store:
// the claim probes the second's handle, which New never saw. It requires that a call
// that fails ran nothing, and that one that succeeds ran the function once.
func secondTenantProcess(t *testing.T, table string, store inbox.Store, key string) func() error {
	ctx := context.Background()
	first := pgStoreOn(t, pgPool(t), table)
	ts := newTenantStoreWith(t, func(_ context.Context, tenant string) (inbox.Tenant, error) {
		if tenant == "first" {
			return inbox.Tenant{Store: first}, nil
		}
		return inbox.Tenant{Store: store}, nil
	})
	ib, err := inbox.New(inbox.Config{Store: ts, Consumer: "billing", MaxAttempts: 3})
	require.NoError(t, err)
	_, err = ib.Process(inbox.ContextWithTenant(ctx, "first"), "billing", "first/"+key, func(context.Context) error { return nil })
	require.NoError(t, err)
	var ran atomic.Int32
	return func() error {
		_, err := ib.Process(inbox.ContextWithTenant(ctx, "second"), "billing", key, func(context.Context) error {
			ran.Add(1)
			return nil
		})
		want := int32(0)
		if err == nil {
			want = 1
		}
		require.Equal(t, want, ran.Load(), "ran %d times, with %v", ran.Load(), err)
		return err
	}
}

// pgStoreOn is a PostgresStore on db and table, whose tables exist.
func pgStoreOn(t *testing.T, db inbox.PgxDB, table string) inbox.Store {
	store, err := inbox.NewPostgresStore(db, inbox.PostgresConfig{Table: table})
	require.NoError(t, err)
	return store
}

// sqlPgStoreOn is a SQLPostgresStore on db and table, whose tables exist.
func sqlPgStoreOn(t *testing.T, db inbox.SQLDB, table string) inbox.Store {
	store, err := inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{Table: table})
	require.NoError(t, err)
	return store
}

// nth matches the n-th command m matches, counting from 1.
func nth(n int32, m netfault.Match) netfault.Match {
	var seen atomic.Int32
	return func(c string) bool { return m(c) && seen.Add(1) == n }
}
