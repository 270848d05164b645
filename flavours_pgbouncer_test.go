package inbox_test

import (
	"database/sql"
	"net/url"
	"os"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

// The PostgreSQL flavours through PgBouncer in transaction pooling mode
// (scripts/pgbouncer.sh, INBOX_PGBOUNCER_DSN): each transaction may run on another
// server connection, session state does not follow the client, and pgx's default
// statement cache cannot work. The suite runs with the two pgx modes that PgBouncer
// serves, over a pool and over one connection, and through database/sql.
//
// PgBouncer takes no session settings from the client: its connect_query gives every
// server connection lock_timeout = 41s, the value the suite's lock probe expects.

// pgbouncerDSN is INBOX_PGBOUNCER_DSN with the pgx settings added. Like
// INBOX_MYSQL_DSN it has no default: .ci/run sets it after scripts/pgbouncer.sh, and
// the flavours skip when it is unset, CI or not.
func pgbouncerDSN(t testing.TB, settings map[string]string) string {
	t.Helper()
	dsn := os.Getenv("INBOX_PGBOUNCER_DSN")
	if dsn == "" {
		t.Skip("PgBouncer not tested: set INBOX_PGBOUNCER_DSN (e.g. postgres://postgres@127.0.0.1:6439/test?sslmode=disable; .ci/run sets it when scripts/pgbouncer.sh started PgBouncer)")
	}
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	for k, v := range settings {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// pgbouncerPgxFlavour is PostgresStore through PgBouncer, pgx in mode (exec or
// simple_protocol).
func pgbouncerPgxFlavour(name string, handle handleKind, mode string) storeFlavour {
	settings := map[string]string{"default_query_exec_mode": mode}
	return storeFlavour{
		name: name,
		caps: caps{attemptsRefused: true, purgeTurnRefused: inbox.ErrPurgeTurnBehindPooler},
		open: func(t *testing.T, opts storeOpts) fixture {
			return pgxFixture(t, pgbouncerDSN(t, settings), handle, opts)
		},
		creators: pgxCreators(func(t testing.TB) string { return pgbouncerDSN(t, settings) }, handle),
		missing: func(t *testing.T) inbox.Store {
			store, err := inbox.NewPostgresStore(pgPoolWith(t, pgbouncerDSN(t, settings)), inbox.PostgresConfig{Table: tableName("missing")})
			require.NoError(t, err)
			return store
		},
	}
}

// pgbouncerSQLFlavour is SQLPostgresStore through PgBouncer, on pgx's stdlib driver in
// mode.
func pgbouncerSQLFlavour(name string, handle handleKind, mode string) storeFlavour {
	settings := map[string]string{"default_query_exec_mode": mode}
	open := func(t testing.TB, dial dialFunc) *sql.DB {
		dsn := pgbouncerDSN(t, settings)
		if dial != nil {
			dsn = pgxDialDSN(t, dsn, dial)
		}
		return openSQL(t, "pgx", dsn, "PgBouncer", "INBOX_PGBOUNCER_DSN")
	}
	return storeFlavour{
		name: name,
		caps: caps{attemptsRefused: true, purgeTurnRefused: inbox.ErrPurgeTurnBehindPooler},
		open: func(t *testing.T, opts storeOpts) fixture {
			return sqlFixture(t, open, handle, false, opts, newSQLPostgresFlavourStore(opts.lockTimeout))
		},
		creators: sqlPostgresCreators(open, handle),
		missing: func(t *testing.T) inbox.Store {
			store, err := inbox.NewSQLPostgresStore(open(t, nil), inbox.SQLPostgresConfig{Table: tableName("missing")})
			require.NoError(t, err)
			return store
		},
	}
}

// skipRefusedAttempts skips a case that counts attempts on a flavour whose store refuses
// MaxAttempts behind a transaction pooler, once it checked the refusal: New fails with
// ErrAttemptsBehindPooler or, for a store New cannot see through (a tenant's), the
// delivery does, before its handler runs.
func (f storeFlavour) skipRefusedAttempts(t *testing.T, store inbox.Store) {
	t.Helper()
	if !f.caps.attemptsRefused {
		return
	}
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "attempts-refused", MaxAttempts: 2})
	if err == nil {
		msg := f.message("attempts-refused-1", nil)
		msg.SetContext(f.context())
		ran := false
		_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { ran = true; return nil, nil })(msg)
		require.False(t, ran, "the handler ran under MaxAttempts behind a transaction pooler")
	}
	require.ErrorIs(t, err, inbox.ErrAttemptsBehindPooler, "MaxAttempts behind a transaction pooler")
	t.Skip("MaxAttempts is refused behind a transaction pooler (ErrAttemptsBehindPooler, ADR 96): checked; attempts are not counted here")
}
