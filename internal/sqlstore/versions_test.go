package sqlstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/schema"
)

func TestRecognised(t *testing.T) {
	for _, c := range []struct {
		name                                  string
		q                                     schema.Sequence
		inbox, attempts, oldAttempts, offsets bool
		want                                  int
	}{
		{"postgres, no tables", schema.PostgresSteps, false, false, false, false, 0},
		{"postgres, attempts counter", schema.PostgresSteps, true, true, true, false, 1},
		{"postgres, attempts per delivery", schema.PostgresSteps, true, true, false, false, 2},
		{"postgres, attempts dropped", schema.PostgresSteps, true, false, false, true, 0},
		{"postgres, offsets", schema.PostgresSteps, true, true, false, true, 3},
		{"mysql, offsets", schema.MySQLSteps, true, true, false, true, 3},
		{"sqlite, no offsets", schema.SQLiteSteps, true, true, false, false, 1},
		{"sqlite, offsets", schema.SQLiteSteps, true, true, false, true, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Recognised(c.q, c.inbox, c.attempts, c.oldAttempts, c.offsets); got.Have != c.want || got.Recorded {
				t.Fatalf("got %+v, want version %d, not recorded", got, c.want)
			}
		})
	}
}

func TestCheckVersion(t *testing.T) {
	q := schema.PostgresSteps // code at version 4
	for _, c := range []struct {
		name    string
		v       Version
		wantErr string // "" for none
	}{
		{"current", Version{Have: 4, Compatible: 2, Recorded: true}, ""},
		{"missing", Version{}, "does not exist: run `inbox migrate up"},
		{"older, recognised", Version{Have: 3, Compatible: 2}, "schema version 3 (recognised by its columns: made before versions were recorded), older than this code's 4: upgrade it with `inbox migrate up --dsn <your DSN> --table inbox --schema s`"},
		{"newer, compatible", Version{Have: 6, Compatible: 4, Recorded: true}, ""},
		{"newer, incompatible", Version{Have: 6, Compatible: 5, Recorded: true}, "which needs code of version 5 or later, and this code is at 4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckVersion(q, c.v, "inbox", UpgradeCommand("inbox", "s"))
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, contract.ErrNoTable) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %v, want ErrNoTable with %q", err, c.wantErr)
			}
		})
	}
}
