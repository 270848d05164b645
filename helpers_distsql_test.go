package inbox_test

import (
	"database/sql"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/watermill-inbox/inbox"
)

// Helpers of the distributed MySQL-wire engines: Vitess (through vtgate) and TiDB. Like
// INBOX_MYSQL_DSN, their variables have no default: .ci/run sets them when
// scripts/vitess.sh and scripts/tidb.sh started the engines, and their tests skip when
// they are unset, CI or not (CI then prints "NOT TESTED this run").

// vitessDSNOf is vtgate's DSN, which names the sharded keyspace as its database and
// asks for two-phase commits (transaction_mode=%27TWOPC%27).
func vitessDSNOf(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("INBOX_VITESS_DSN")
	if dsn == "" {
		t.Skip("Vitess not tested: set INBOX_VITESS_DSN (e.g. root@tcp(127.0.0.1:15303)/inbox?transaction_mode=%27TWOPC%27; .ci/run sets it when scripts/vitess.sh started vttestserver)")
	}
	return dsn
}

// vitessDB returns a handle on vtgate.
func vitessDB(t testing.TB) *sql.DB {
	return openSQL(t, "mysql", vitessDSNOf(t), "Vitess", "INBOX_VITESS_DSN")
}

// tidbDSNOf is the test TiDB's DSN.
func tidbDSNOf(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("INBOX_TIDB_DSN")
	if dsn == "" {
		t.Skip("TiDB not tested: set INBOX_TIDB_DSN (e.g. root@tcp(127.0.0.1:4000)/test; .ci/run sets it when scripts/tidb.sh started tidb-server)")
	}
	return dsn
}

// tidbDB returns a handle on the test TiDB.
func tidbDB(t testing.TB) *sql.DB {
	return openSQL(t, "mysql", tidbDSNOf(t), "TiDB", "INBOX_TIDB_DSN")
}

var vschemaMu sync.Mutex

// vitessFlavour is MySQLStore through vtgate. The ledger is sharded by its amount, so
// that a credit and the key mostly land on different shards: the suite's transactions
// cross shards.
func vitessFlavour() storeFlavour {
	f := mysqlFlavour("vitess", vitessDSNOf, inbox.MySQLConfig{Engine: inbox.MySQLVitess})
	f.caps.noBatch = true   // a batch's keys span shards: refused (MySQLStore.ClaimBatch)
	f.caps.noOffsets = true // no offset mode on Vitess (MySQLStore.ClaimOffsets)
	open := f.open
	f.open = func(t *testing.T, opts storeOpts) fixture {
		// ALTER VSCHEMA rewrites the keyspace's whole VSchema: one at a time, so that
		// parallel tests do not undo each other's entries.
		vschemaMu.Lock()
		defer vschemaMu.Unlock()
		fx := open(t, opts)
		l := fx.ledger.(sqlLedger)
		_, err := l.db.Exec("ALTER VSCHEMA ON " + l.table + " ADD VINDEX `hash`(`amount`) USING `hash`")
		if err != nil {
			t.Fatalf("adding the ledger to the VSchema: %v", err)
		}
		// vtgate serves a VSchema change a moment after ALTER VSCHEMA returns, and the
		// next ALTER VSCHEMA starts from what it serves: wait, or the next one undoes it.
		waitVSchema(t, l.db, l.table)
		return fx
	}
	creators := f.creators
	f.creators = func(t *testing.T, n int) []inbox.Store {
		// ALTER VSCHEMA rewrites the keyspace's whole VSchema: the race's creators take
		// turns among themselves (ADR 133), but the suite's other fixtures do not.
		vschemaMu.Lock()
		t.Cleanup(vschemaMu.Unlock)
		return creators(t, n)
	}
	f.missing = func(t *testing.T) inbox.Store {
		store, err := inbox.NewMySQLStore(vitessDB(t), inbox.MySQLConfig{Table: tableName("missing"), Engine: inbox.MySQLVitess})
		if err != nil {
			t.Fatal(err)
		}
		return store
	}
	return f
}

// waitVSchema waits until vtgate serves table's VSchema entry in two reads 100 ms apart
// (for a moment after a change, vtgate may serve the previous version again).
func waitVSchema(t testing.TB, db *sql.DB, table string) {
	t.Helper()
	seen := false
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := db.Exec("SHOW VSCHEMA VINDEXES ON " + table)
		if err == nil && seen {
			return
		}
		seen = err == nil
		if time.Now().After(deadline) {
			t.Fatalf("vtgate does not serve the VSchema entry of %s: %v", table, err)
		}
	}
}
