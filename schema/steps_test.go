package schema_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/watermill-inbox/inbox/schema"
)

// The files of package migrations are generated from the sequences: one source.
func TestMigrationFilesAreGenerated(t *testing.T) {
	want := schema.MigrationFiles()
	dir := filepath.Join("..", "migrations")
	var onDisk []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "migratetest" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") {
			return nil
		}
		onDisk = append(onDisk, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wanted []string
	for name, body := range want {
		wanted = append(wanted, name)
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil || string(got) != body {
			t.Errorf("migrations/%s differs from schema/steps (%v): run go generate ./schema", name, err)
		}
	}
	sort.Strings(wanted)
	sort.Strings(onDisk)
	if strings.Join(wanted, "\n") != strings.Join(onDisk, "\n") {
		t.Errorf("migrations/ holds other files than schema/steps generates: run go generate ./schema, and delete what it does not write\nwant:\n%s\nhave:\n%s", strings.Join(wanted, "\n"), strings.Join(onDisk, "\n"))
	}
}

// Each sequence runs from version 1 with no gap, and its last step is recorded by the
// DDL of schema/*.sql (the tables for a fresh database) with its compatible version.
func TestSequences(t *testing.T) {
	for _, c := range []struct {
		q       schema.Sequence
		current string
	}{{schema.PostgresSteps, schema.Postgres}, {schema.MySQLSteps, schema.MySQL}, {schema.SQLiteSteps, schema.SQLite}} {
		t.Run(c.q.Dialect, func(t *testing.T) {
			for i, s := range c.q.Steps {
				if s.Version != i+1 || s.Compatible < 1 || s.Compatible > s.Version {
					t.Fatalf("step %d: version %d, compatible %d", i, s.Version, s.Compatible)
				}
			}
			last := c.q.Step(c.q.Version())
			if !strings.Contains(c.current, "'"+last.Name+"'") {
				t.Errorf("schema/%s.sql does not record version %d (%s): add its row to the version table's INSERT", c.q.Dialect, last.Version, last.Name)
			}
		})
	}
}
