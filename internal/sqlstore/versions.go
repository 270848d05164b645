package sqlstore

import (
	"fmt"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/schema"
)

// The tables' version (ADR 134, 135). Each SQL store reads the version of its tables:
// the last row of <table>_schema, or, for tables made before versions were recorded,
// the version their columns match (Recognised). CreateSchema applies the steps above
// it; Verify refuses tables older than the code, and newer ones unless their row says
// this code's version still runs on them.

// Version is what a store knows of its tables' version.
type Version struct {
	Have       int  // the tables' version; 0: no tables
	Compatible int  // the oldest code version that runs on them (Step.Compatible)
	Recorded   bool // read from <table>_schema, not recognised by the columns
}

// Recognised is the version of tables without <table>_schema, by what they have: the
// inbox table, the attempts table, the one of before version 2 (a counter per key,
// column "started"), the offsets table. Without the inbox or the attempts table it is 0,
// so that the whole DDL (idempotent) runs: a first creation, or one a crash or a DROP
// cut short (MySQL's DDL commits statement by statement). The offsets table is optional
// (offset mode only): tables without it are taken as at the version before it, and its
// step adds it.
func Recognised(q schema.Sequence, inbox, attempts, oldAttempts, offsets bool) Version {
	v := 0
	switch {
	case !inbox || !attempts:
	case q.Dialect == "sqlite" && offsets:
		v = 2
	case q.Dialect == "sqlite":
		v = 1
	case oldAttempts:
		v = 1
	case offsets:
		v = 3
	default:
		v = 2
	}
	compat := 0
	if v > 0 {
		compat = q.Step(v).Compatible
	}
	return Version{Have: v, Compatible: compat}
}

// CheckVersion returns nil when code of q's version runs on tables at v, or an error
// wrapping contract.ErrNoTable that says what to do: upgrade names the command that
// upgrades these tables.
func CheckVersion(q schema.Sequence, v Version, table, upgrade string) error {
	want := q.Version()
	how := "recorded in " + table + "_schema"
	if !v.Recorded {
		how = "recognised by its columns: made before versions were recorded"
	}
	switch {
	case v.Have == 0:
		return fmt.Errorf("%w: table %q does not exist: run `%s` or the store's CreateSchema", contract.ErrNoTable, table, upgrade)
	case v.Have < want:
		return fmt.Errorf("%w: table %q is at schema version %d (%s), older than this code's %d: upgrade it with `%s` (or the store's CreateSchema), then start again", contract.ErrNoTable, table, v.Have, how, want, upgrade)
	case v.Have > want && v.Compatible > want:
		return fmt.Errorf("%w: table %q is at schema version %d, which needs code of version %d or later, and this code is at %d: deploy the inbox release that migrated it", contract.ErrNoTable, table, v.Have, v.Compatible, want)
	}
	return nil
}

// UpgradeCommand is the CLI command that upgrades table (in pgSchema, for PostgreSQL,
// when not empty).
func UpgradeCommand(table, pgSchema string) string {
	cmd := "inbox migrate up --dsn <your DSN> --table " + table
	if pgSchema != "" {
		cmd += " --schema " + pgSchema
	}
	return cmd
}
