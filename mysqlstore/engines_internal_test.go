package mysqlstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
)

// codeOf drops a statement's leading comment lines, which differ between the files.
func codeOf(stmt string) string {
	lines := strings.Split(stmt, "\n")
	for len(lines) > 0 && (strings.HasPrefix(lines[0], "--") || strings.TrimSpace(lines[0]) == "") {
		lines = lines[1:]
	}
	return strings.Join(lines, "\n")
}

// schema/tidb.sql is schema/mysql.sql without the UTC defaults: the same statements
// CreateSchema runs on TiDB.
func TestTiDBSchemaFileMatchesTheStore(t *testing.T) {
	file, err := os.ReadFile("../schema/tidb.sql")
	if err != nil {
		t.Fatal(err)
	}
	ddl, err := mysqlSchemaFor(TiDB, contract.DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	got, want := sqlstore.Statements(string(file)), sqlstore.Statements(ddl)
	if len(got) != 5 || len(got) != len(want) { // three tables, the version table and its rows
		t.Fatalf("schema/tidb.sql has %d statements, the store %d", len(got), len(want))
	}
	for i := range got {
		if g, w := codeOf(got[i]), codeOf(want[i]); g != w {
			t.Errorf("statement %d of schema/tidb.sql differs from the store's:\n%s\nwant:\n%s", i, g, w)
		}
	}
}

// schema/vitess-vschema.json shards both tables by the key, as CreateSchema does.
func TestVitessVSchemaFileShardsByKey(t *testing.T) {
	file, err := os.ReadFile("../schema/vitess-vschema.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs struct {
		Sharded  bool
		Vindexes map[string]struct{ Type string }
		Tables   map[string]struct {
			ColumnVindexes []struct{ Column, Name string } `json:"column_vindexes"`
		}
	}
	if err := json.Unmarshal(file, &vs); err != nil {
		t.Fatal(err)
	}
	if !vs.Sharded || vs.Vindexes["xxhash"].Type != "xxhash" || len(vs.Tables) != 2 {
		t.Fatalf("unexpected VSchema %+v", vs)
	}
	for _, name := range []string{contract.DefaultTable, contract.DefaultTable + "_attempts"} {
		cv := vs.Tables[name].ColumnVindexes
		if len(cv) != 1 || cv[0].Column != "key" || cv[0].Name != "xxhash" {
			t.Errorf("table %q: column_vindexes %+v, want key by xxhash", name, cv)
		}
	}
}

func TestEngineOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		version string
		want    Engine
		ok      bool
	}{
		{"8.0.11-TiDB-v8.4.0-this-is-a-placeholder", TiDB, true},
		{"5.7.25-TiDB-v7.5.1", TiDB, true},
		{"8.4.6-Vitess", Vitess, true},
		{"8.0.40-Vitess", Vitess, true},
		{"9.7.4-2", InnoDB, false},
		{"10.11.19-MariaDB-0+deb12u1", InnoDB, false},
	} {
		got, ok := engineOf(tt.version)
		if got != tt.want || ok != tt.ok {
			t.Errorf("engineOf(%q) = %v, %v; want %v, %v", tt.version, got, ok, tt.want, tt.ok)
		}
	}
}

// On Vitess, which has no offset mode, CreateSchema leaves the offsets table out, and the
// version table (ADR 134): the statements are schema/mysql.sql's others.
func TestVitessSchemaLeavesOutTheOffsetsTable(t *testing.T) {
	ddl, err := mysqlSchemaFor(Vitess, "orders")
	if err != nil {
		t.Fatal(err)
	}
	all, err := Schema("orders")
	if err != nil {
		t.Fatal(err)
	}
	got, want := sqlstore.Statements(ddl), sqlstore.Statements(all)
	if len(got) != 2 || len(want) != 5 || got[0] != want[0] || got[1] != want[1] || !strings.Contains(want[2], "`orders_offsets`") ||
		!strings.Contains(want[3], "`orders_schema`") || !strings.Contains(want[4], "`orders_schema`") {
		t.Fatalf("Vitess DDL %q, from %q", got, want)
	}
}

// TiDB gives up a pessimistic statement whose keys other transactions keep changing with
// its generic error 1105 and the text "pessimistic lock retry limit reached"
// (pkg/executor/adapter.go of TiDB). A batch claim's INSERT met it in the conformance case
// OverlappingBatchesRacingApplyEachMessageOnce on a loaded machine, and the claim failed
// as an unclassified error. It is contention: the statement did nothing, a retry can
// help. Only on TiDB, and only with that text: 1105 is TiDB's number for many things.
func TestTiDBLockRetryLimitIsContention(t *testing.T) {
	limit := &mysql.MySQLError{Number: 1105, Message: "pessimistic lock retry limit reached"}
	other := &mysql.MySQLError{Number: 1105, Message: "runtime error: index out of range"}
	for _, tc := range []struct {
		engine    Engine
		err       error
		contended bool
	}{
		{TiDB, limit, true},
		{TiDB, fmt.Errorf("inserting: %w", limit), true},
		{TiDB, other, false},
		{InnoDB, limit, false},
	} {
		s := &Store{cfg: Config{Engine: tc.engine, Table: contract.DefaultTable}}
		err := s.wrap("inserting the keys", tc.err)
		if got := errors.Is(err, contract.ErrContended); got != tc.contended {
			t.Errorf("%v, %q: contended %v, want %v (%v)", tc.engine, tc.err, got, tc.contended, err)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%v: the driver's error is not wrapped: %v", tc.engine, err)
		}
		if n := strings.Count(err.Error(), "inbox:"); n != 1 {
			t.Errorf("%v: %q says inbox: %d times", tc.engine, err, n)
		}
	}
}
