package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/schema"
)

// A rolling deploy (ADR 135): consumers of the previous release keep processing a
// stream on tables at its version while another process migrates them (the test binary
// re-executed, as `inbox migrate up` would run) and consumers of this release start on
// the upgraded tables beside the old ones. Every message is delivered twice; the ledger
// must show each applied exactly once.

const (
	rollingHelperEnv = "INBOX_ROLLING_HELPER"
	rollingTableEnv  = "INBOX_ROLLING_TABLE"
	rollingKindEnv   = "INBOX_ROLLING_KIND"
	rollingDSNEnv    = "INBOX_ROLLING_DSN"
	rollingMessages  = 400
)

// previousRelease is a store as the previous release's code ran it: the same statements
// on the same tables (the new version only adds <table>_schema), and no version check.
type previousRelease struct{ inbox.Store }

func (previousRelease) Verify(context.Context) error { return nil }

// TestRollingUpgradeHelper is the migrating process.
func TestRollingUpgradeHelper(t *testing.T) {
	if os.Getenv(rollingHelperEnv) != "1" {
		return // not a child
	}
	ctx := context.Background()
	store, done, err := openFleetStore(ctx, os.Getenv(rollingKindEnv), os.Getenv(rollingDSNEnv), os.Getenv(rollingTableEnv))
	require.NoError(t, err)
	defer done()
	before, after, err := store.(interface {
		MigrateSchema(ctx context.Context) (before, after int, err error)
	}).MigrateSchema(ctx)
	require.NoError(t, err)
	fmt.Printf("migrated %d -> %d\n", before, after)
}

// rollingKind is a store the rolling upgrade runs on: its DSN, its sequence, its
// tables at the previous release's version, and a ledger in the same database.
type rollingKind struct {
	name, dsn string
	seq       schema.Sequence
	exec      func(t *testing.T, query string)
	ledger    ledger
}

func rollingKinds(t *testing.T) []func(t *testing.T, table string) rollingKind {
	return []func(t *testing.T, table string) rollingKind{
		func(t *testing.T, table string) rollingKind {
			pool := pgPool(t)
			pgDropTables(t, "", table)
			return rollingKind{name: "pgx", dsn: postgresDSN(), seq: schema.PostgresSteps, ledger: newPgLedger(t, pool),
				exec: func(t *testing.T, q string) { _, err := pool.Exec(context.Background(), q); require.NoError(t, err) }}
		},
		func(t *testing.T, table string) rollingKind {
			db := mariaDB(t)
			t.Cleanup(func() {
				for _, suffix := range inboxTables {
					_, _ = db.Exec("DROP TABLE IF EXISTS `" + table + suffix + "`")
				}
			})
			return rollingKind{name: "mariadb", dsn: mariaDBDSN(), seq: schema.MySQLSteps, ledger: newSQLLedger(t, db, true),
				exec: func(t *testing.T, q string) { _, err := db.Exec(q); require.NoError(t, err) }}
		},
		func(t *testing.T, table string) rollingKind {
			path := filepath.Join(t.TempDir(), "rolling.db")
			db := sqliteDB(t, modernc, path)
			return rollingKind{name: "sqlite", dsn: path, seq: schema.SQLiteSteps, ledger: newSQLiteLedger(t, db),
				exec: func(t *testing.T, q string) { _, err := db.Exec(q); require.NoError(t, err) }}
		},
	}
}

func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	if os.Getenv(rollingHelperEnv) == "1" {
		t.Skip("a child")
	}
	for _, open := range rollingKinds(t) {
		table := tableName("rolling")
		k := open(t, table)
		t.Run(k.name, func(t *testing.T) { rollingUpgrade(t, k, table) })
	}
}

func rollingUpgrade(t *testing.T, k rollingKind, table string) {
	ctx := context.Background()
	seq, ledger := k.seq, k.ledger
	quote := `"`
	if seq.Dialect == "mysql" {
		quote = "`"
	}
	for n := 1; n < seq.Version(); n++ { // the previous release's tables
		for _, stmt := range sqlstore.Statements(sqlstore.WithTable(seq.Step(n).Up, quote, table)) {
			k.exec(t, stmt)
		}
	}
	store, done, err := openFleetStore(ctx, k.name, k.dsn, table)
	require.NoError(t, err)
	t.Cleanup(done)
	_, err = inbox.New(inbox.Config{Store: store, Consumer: "billing"})
	require.ErrorIs(t, err, inbox.ErrNoTable, "this release refuses the previous release's tables")
	old := newTestInbox(t, previousRelease{store}, inbox.Config{})

	// Each message twice, in a random order, fed in three parts: before the migration,
	// while it runs, after it (to both releases).
	stream := make(chan string)
	order := rand.Perm(2 * rollingMessages)
	feed := func(part []int) {
		for _, i := range part {
			stream <- fmt.Sprint("msg-", i%rollingMessages)
		}
	}
	q := len(order) / 4
	var byOld, byNew, oldAfterMigration atomic.Int64
	var migrated atomic.Bool
	consume := func(ib *inbox.Inbox, n *atomic.Int64, isOld bool) error {
		for key := range stream {
			dup, err := creditOnce(ctx, ib, ledger, "billing", key, 1)
			for err != nil && errors.Is(err, inbox.ErrContended) { // a concurrent duplicate: redelivered
				dup, err = creditOnce(ctx, ib, ledger, "billing", key, 1)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if !dup {
				n.Add(1)
				if isOld && migrated.Load() {
					oldAfterMigration.Add(1)
				}
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 { // the old release's replicas
		wg.Add(1)
		go func() { defer wg.Done(); errs <- consume(old, &byOld, true) }()
	}
	feed(order[:q])
	cmd := exec.Command(os.Args[0], "-test.run=^TestRollingUpgradeHelper$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), rollingHelperEnv+"=1", rollingTableEnv+"="+table, rollingKindEnv+"="+k.name, rollingDSNEnv+"="+k.dsn)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	feed(order[q : 2*q])
	require.NoError(t, cmd.Wait(), "%s", out.String())
	require.Contains(t, out.String(), fmt.Sprintf("migrated %d -> %d", seq.Version()-1, seq.Version()))
	migrated.Store(true)
	ib, err := inbox.New(inbox.Config{Store: store, Consumer: "billing"}) // this release's replica starts
	require.NoError(t, err, "the upgraded tables pass New")
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- consume(ib, &byNew, false) }()
	}
	feed(order[2*q:])
	close(stream)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	total, credits := ledger.balance(t)
	require.Equal(t, [2]int{rollingMessages, rollingMessages}, [2]int{total, credits}, "every message applied exactly once")
	require.Equal(t, int64(rollingMessages), byOld.Load()+byNew.Load())
	require.Positive(t, byNew.Load(), "this release's replicas processed part of the stream")
	t.Logf("%s rolling upgrade: %d messages delivered twice; %d applied by the previous release (%d of them after the migration), %d by this one; ledger %d credits, total %d",
		k.name, rollingMessages, byOld.Load(), oldAfterMigration.Load(), byNew.Load(), credits, total)
}
