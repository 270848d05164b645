package schema

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// A Step is one migration of a dialect's sequence, for the default table name "inbox":
// the stores rename the tables for theirs. The sequences are the one source of the
// inbox's migrations (ADR 134): CreateSchema and `inbox migrate up` apply the steps a
// table lacks, and the golang-migrate and goose folders of package migrations are
// generated from them (go generate ./schema).
type Step struct {
	Version int    // 1, 2...: the tables' version once the step is applied
	Name    string // attempts_per_delivery: the file name's tail
	Up      string // the DDL that makes version Version from Version-1
	Down    string // the DDL that undoes it
	// Compatible is the oldest version whose code runs on tables at Version: a step that
	// only adds (a table, a nullable column) keeps the previous step's; a step that
	// changes what older code reads or writes sets its own Version. Code newer than the
	// tables is refused; code older is accepted when Compatible allows it (ADR 135).
	Compatible int
}

// A Sequence is the migrations of one dialect, in order, with no gap from version 1.
type Sequence struct {
	Dialect string // postgres, mysql, sqlite: the folder of schema/steps
	Steps   []Step
}

// Version is the version of the sequence's last step: the one the code needs.
func (q Sequence) Version() int { return len(q.Steps) }

// Step returns the step of version v (1-based).
func (q Sequence) Step(v int) Step { return q.Steps[v-1] }

//go:embed steps
var stepFiles embed.FS

// compatible lists, per dialect, each version's Step.Compatible, from version 1.
var compatible = map[string][]int{
	"postgres": {1, 2, 2, 2},
	"mysql":    {1, 2, 2, 2},
	"sqlite":   {1, 1, 1},
}

var (
	// PostgresSteps are the migrations of the PostgreSQL stores (schema/steps/postgres).
	PostgresSteps = mustSequence("postgres")
	// MySQLSteps are the migrations of the MySQL store, MariaDB, TiDB (without the
	// server-side UTC defaults) and Vitess (schema/steps/mysql).
	MySQLSteps = mustSequence("mysql")
	// SQLiteSteps are the migrations of sqlitestore (schema/steps/sqlite).
	SQLiteSteps = mustSequence("sqlite")
)

// mustSequence reads a dialect's steps from schema/steps/<dialect>: files
// NNNNNN_name.up.sql and NNNNNN_name.down.sql, numbered from 1 with no gap.
func mustSequence(dialect string) Sequence {
	q, err := readSequence(stepFiles, path.Join("steps", dialect))
	if err != nil {
		panic(err)
	}
	q.Dialect = dialect
	if len(compatible[dialect]) != len(q.Steps) {
		panic(fmt.Sprintf("schema: %d steps for %s, and %d compatible versions", len(q.Steps), dialect, len(compatible[dialect])))
	}
	for i := range q.Steps {
		q.Steps[i].Compatible = compatible[dialect][i]
	}
	return q
}

// readSequence reads the step files of dir.
func readSequence(fsys fs.FS, dir string) (Sequence, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return Sequence{}, err
	}
	var q Sequence
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".up.sql")
		if !ok {
			continue
		}
		num, tail, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != len(q.Steps)+1 {
			return Sequence{}, fmt.Errorf("schema: %s/%s: want version %d, named NNNNNN_name.up.sql", dir, e.Name(), len(q.Steps)+1)
		}
		up, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return Sequence{}, err
		}
		down, err := fs.ReadFile(fsys, path.Join(dir, name+".down.sql"))
		if err != nil {
			return Sequence{}, err
		}
		q.Steps = append(q.Steps, Step{Version: v, Name: tail, Up: string(up), Down: string(down)})
	}
	return q, nil
}

// FileName is the step's golang-migrate file name without the .up.sql or .down.sql:
// 000002_attempts_per_delivery.
func (s Step) FileName() string { return fmt.Sprintf("%06d_%s", s.Version, s.Name) }

// Goose is the step as one goose file (-- +goose Up, -- +goose Down).
func (s Step) Goose() string {
	return "-- +goose Up\n-- Generated from the golang-migrate files by migratetest (go test -update); do not edit.\n" + s.Up +
		"\n-- +goose Down\n" + s.Down
}

// AtlasSum is the atlas.sum of the sequence's golang-migrate files (Atlas's
// integrity file: a running SHA-256 over each file's name and content, in name order,
// and a first line that sums the lines).
func (q Sequence) AtlasSum() string {
	type file struct{ name, body string }
	var files []file
	for _, s := range q.Steps {
		files = append(files, file{s.FileName() + ".down.sql", s.Down}, file{s.FileName() + ".up.sql", s.Up})
	}
	h, total := sha256.New(), sha256.New()
	var lines []string
	for _, f := range files {
		h.Write([]byte(f.name))
		h.Write([]byte(f.body))
		sum := base64.StdEncoding.EncodeToString(h.Sum(nil))
		total.Write([]byte(f.name))
		total.Write([]byte(sum))
		lines = append(lines, f.name+" h1:"+sum)
	}
	return "h1:" + base64.StdEncoding.EncodeToString(total.Sum(nil)) + "\n" + strings.Join(lines, "\n") + "\n"
}

// MigrationFiles returns the files of package migrations that the sequences generate,
// keyed by their path under migrations/: the golang-migrate files and atlas.sum of
// postgres/, mysql/ and sqlite/, and goose/<dialect>/. go generate ./schema writes them.
func MigrationFiles() map[string]string {
	files := map[string]string{}
	for _, q := range []Sequence{PostgresSteps, MySQLSteps, SQLiteSteps} {
		for _, s := range q.Steps {
			files[path.Join(q.Dialect, s.FileName()+".up.sql")] = s.Up
			files[path.Join(q.Dialect, s.FileName()+".down.sql")] = s.Down
			files[path.Join("goose", q.Dialect, s.FileName()+".sql")] = s.Goose()
		}
		files[path.Join(q.Dialect, "atlas.sum")] = q.AtlasSum()
	}
	return files
}
