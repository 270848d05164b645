// Package migratetest applies the migrations of package migrations with golang-migrate
// and goose, as libraries, to the real databases, and checks that the result is what
// schema/*.sql creates (the catalog, not the text) and that inbox.New accepts it. It is
// a module of its own so that neither tool enters the root module's graph.
package migratetest

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/mysql"  // mysql://
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/sqltest"
	"github.com/watermill-inbox/inbox/migrations"
)

var update = flag.Bool("update", false, "rewrite the goose files from the golang-migrate files")

// dialectDir is the migrations directory of a database's dialect.
func dialectDir(d sqltest.Database) string {
	if d.Dialect == sqltest.MySQL {
		return "mysql"
	}
	return "postgres"
}

// gooseFile is the goose form of one golang-migrate version: up and down in one file.
func gooseFile(up, down []byte) []byte {
	return []byte("-- +goose Up\n-- Generated from the golang-migrate files by migratetest (go test -update); do not edit.\n" +
		string(up) + "\n-- +goose Down\n" + string(down))
}

// The goose files are generated from the golang-migrate files, so the two layouts are
// one source.
func TestGooseFilesAreGenerated(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql", "sqlite"} {
		ups, err := fs.Glob(migrations.FS, dialect+"/*.up.sql")
		require.NoError(t, err)
		require.NotEmpty(t, ups)
		gooseFiles, err := fs.Glob(migrations.FS, "goose/"+dialect+"/*.sql")
		require.NoError(t, err)
		var want []string
		for _, upPath := range ups {
			version := strings.TrimSuffix(filepath.Base(upPath), ".up.sql")
			up, err := fs.ReadFile(migrations.FS, upPath)
			require.NoError(t, err)
			down, err := fs.ReadFile(migrations.FS, dialect+"/"+version+".down.sql")
			require.NoError(t, err, "every up migration has its down migration")
			path := "goose/" + dialect + "/" + version + ".sql"
			want = append(want, path)
			if *update {
				require.NoError(t, os.WriteFile(filepath.Join("..", path), gooseFile(up, down), 0o644))
				continue
			}
			got, err := fs.ReadFile(migrations.FS, path)
			require.NoError(t, err, "run go test -update in migrations/migratetest")
			require.Equal(t, string(gooseFile(up, down)), string(got), "%s is stale: run go test -update in migrations/migratetest", path)
		}
		if !*update {
			require.Equal(t, want, gooseFiles, "one goose file per golang-migrate version, no other")
		}
	}
}

// tool applies or reverts all migrations to a database reached by dsn.
type tool struct {
	name string
	up   func(t *testing.T, d sqltest.Database, dsn string) error
	down func(t *testing.T, d sqltest.Database, dsn string) error
}

var tools = []tool{
	{
		name: "golang-migrate",
		up: func(t *testing.T, d sqltest.Database, dsn string) error {
			return golangMigrate(t, d, dsn).Up()
		},
		down: func(t *testing.T, d sqltest.Database, dsn string) error {
			return golangMigrate(t, d, dsn).Down()
		},
	},
	{
		name: "atlas", // down: none, atlas plans reverts itself
		up:   atlasUp,
	},
	{
		name: "goose",
		up: func(t *testing.T, d sqltest.Database, dsn string) error {
			_, err := gooseProvider(t, d, dsn).Up(context.Background())
			return err
		},
		down: func(t *testing.T, d sqltest.Database, dsn string) error {
			_, err := gooseProvider(t, d, dsn).DownTo(context.Background(), 0)
			return err
		},
	},
}

func golangMigrate(t *testing.T, d sqltest.Database, dsn string) *migrate.Migrate {
	t.Helper()
	src, err := iofs.New(migrations.FS, dialectDir(d))
	require.NoError(t, err)
	url := "mysql://" + dsn // the driver sets multiStatements itself
	if d.Dialect == sqltest.Postgres {
		url = strings.Replace(dsn, "postgres://", "pgx5://", 1)
		url = strings.Replace(url, "postgresql://", "pgx5://", 1)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, url)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = m.Close() })
	return m
}

func gooseProvider(t *testing.T, d sqltest.Database, dsn string) *goose.Provider {
	t.Helper()
	dir, err := fs.Sub(migrations.FS, "goose/"+dialectDir(d))
	require.NoError(t, err)
	dialect := goose.DialectPostgres
	if d.Dialect == sqltest.MySQL {
		dialect = goose.DialectMySQL
	}
	p, err := goose.NewProvider(dialect, d.OpenDSN(t, dsn), dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// createSchema creates the tables as the library does from schema/*.sql.
func createSchema(t *testing.T, d sqltest.Database, db *sql.DB) {
	t.Helper()
	var err error
	if d.Dialect == sqltest.MySQL {
		var s *inbox.MySQLStore
		if s, err = inbox.NewMySQLStore(db, inbox.MySQLConfig{}); err == nil {
			err = s.CreateSchema(context.Background())
		}
	} else {
		var s *inbox.SQLPostgresStore
		if s, err = inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{}); err == nil {
			err = s.CreateSchema(context.Background())
		}
	}
	require.NoError(t, err)
}

// newInbox builds an inbox on the default table of db, as a service would.
func newInbox(d sqltest.Database, db *sql.DB) error {
	var store inbox.Store
	var err error
	if d.Dialect == sqltest.MySQL {
		store, err = inbox.NewMySQLStore(db, inbox.MySQLConfig{})
	} else {
		store, err = inbox.NewSQLPostgresStore(db, inbox.SQLPostgresConfig{})
	}
	if err != nil {
		return err
	}
	_, err = inbox.New(inbox.Config{Store: store})
	return err
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	for _, d := range sqltest.Databases() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			// The reference: what schema/*.sql creates.
			refName, refDSN := d.Isolated(t)
			refDB := d.OpenDSN(t, refDSN)
			createSchema(t, d, refDB)
			want := readCatalog(t, d, refDB, refName)
			require.Len(t, want.Tables, 4, "schema/*.sql creates the inbox table, its attempts table, its offsets table and its version table")

			for _, tl := range tools {
				t.Run(tl.name, func(t *testing.T) {
					t.Parallel()
					name, dsn := d.IsolatedDatabase(t) // atlas reads the whole catalog
					db := d.OpenDSN(t, dsn)
					require.ErrorIs(t, newInbox(d, db), inbox.ErrNoTable, "an empty database has no inbox")

					require.NoError(t, tl.up(t, d, dsn))
					require.Equal(t, want, readCatalog(t, d, db, name), "the migrations make what schema/*.sql makes")
					require.Equal(t, versionRows(t, refDB, d.Quote), versionRows(t, db, d.Quote), "the migrations record the versions schema/*.sql records")
					require.NoError(t, newInbox(d, db), "inbox.New accepts the migrated tables")

					if tl.down == nil {
						return
					}
					require.NoError(t, tl.down(t, d, dsn))
					require.Empty(t, readCatalog(t, d, db, name).Tables, "down removes the tables")
					require.NoError(t, tl.up(t, d, dsn))
					require.Equal(t, want, readCatalog(t, d, db, name), "up again after down")
				})
			}

			t.Run("adopting tables CreateSchema made", func(t *testing.T) {
				t.Parallel()
				name, dsn := d.Isolated(t)
				db := d.OpenDSN(t, dsn)
				createSchema(t, d, db)
				err := tools[0].up(t, d, dsn)
				require.False(t, err != nil && !errors.Is(err, migrate.ErrNoChange), "version 1 runs on existing tables: %v", err)
				require.Equal(t, want, readCatalog(t, d, db, name))
			})
		})
	}
}

// A database at version 1 (an attempts table that counts per key, with rows in it)
// moves to version 2 with golang-migrate or with CreateSchema: the old counters are
// dropped, and the inbox counts attempts per delivery.
func TestMigrationsFromVersion1(t *testing.T) {
	t.Parallel()
	for _, d := range sqltest.Databases() {
		for _, how := range []string{"golang-migrate", "CreateSchema"} {
			t.Run(d.Name+"/"+how, func(t *testing.T) {
				t.Parallel()
				_, dsn := d.Isolated(t)
				db := d.OpenDSN(t, dsn)
				m := golangMigrate(t, d, dsn)
				require.NoError(t, m.Migrate(1))
				_, err := db.Exec(d.SQL(`INSERT INTO ` + d.Quote("inbox_attempts") + ` (consumer, ` + d.Quote("key") + `, started) VALUES ('billing', 'order-1', 3)`))
				require.NoError(t, err)
				require.ErrorIs(t, newInbox(d, db), inbox.ErrNoTable, "version 1's attempts table is outdated")

				if how == "CreateSchema" {
					createSchema(t, d, db)
				} else {
					require.NoError(t, m.Up())
				}
				require.NoError(t, newInbox(d, db))
				var rows int
				require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM `+d.Quote("inbox_attempts")).Scan(&rows))
				require.Zero(t, rows, "the old counters are dropped")
			})
		}
	}
}

// versionRows returns the rows of inbox_schema, the tables' version (ADR 134), as
// "version name compatible" lines, in version order.
func versionRows(t *testing.T, db *sql.DB, quote func(string) string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT ` + quote("version") + `, ` + quote("name") + `, ` + quote("compatible") + ` FROM ` + quote("inbox_schema") + ` ORDER BY ` + quote("version"))
	require.NoError(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var version, compatible int
		var name string
		require.NoError(t, rows.Scan(&version, &name, &compatible))
		got = append(got, fmt.Sprint(version, " ", name, " ", compatible))
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, got, "a version is recorded")
	return got
}
