package migratetest

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	atlassqlite "ariga.io/atlas/sql/sqlite"
	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/sqlite" // sqlite:// (modernc.org/sqlite)
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/migrations"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// SQLite needs no server: each case gets database files of its own in t.TempDir().

// sqliteTool applies or reverts the migrations in migrations/sqlite to the file at path.
type sqliteTool struct {
	name     string
	up, down func(t *testing.T, path string) error
}

var sqliteTools = []sqliteTool{
	{
		name: "golang-migrate",
		up:   func(t *testing.T, path string) error { return sqliteMigrate(t, path).Up() },
		down: func(t *testing.T, path string) error { return sqliteMigrate(t, path).Down() },
	},
	{
		name: "atlas", // down: none, atlas plans reverts itself
		up: func(t *testing.T, path string) error {
			drv, err := atlassqlite.Open(openSQLite(t, path))
			if err != nil {
				return err
			}
			ex, err := atlasmigrate.NewExecutor(drv, atlasDir(t, "sqlite"), &revisions{})
			if err != nil {
				return err
			}
			return ex.ExecuteN(context.Background(), 0)
		},
	},
	{
		name: "goose",
		up: func(t *testing.T, path string) error {
			_, err := sqliteGoose(t, path).Up(context.Background())
			return err
		},
		down: func(t *testing.T, path string) error {
			_, err := sqliteGoose(t, path).DownTo(context.Background(), 0)
			return err
		},
	},
}

func sqliteMigrate(t *testing.T, path string) *migrate.Migrate {
	t.Helper()
	src, err := iofs.New(migrations.FS, "sqlite")
	require.NoError(t, err)
	m, err := migrate.NewWithSourceInstance("iofs", src, "sqlite://"+path)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = m.Close() })
	return m
}

func sqliteGoose(t *testing.T, path string) *goose.Provider {
	t.Helper()
	dir, err := fs.Sub(migrations.FS, "goose/sqlite")
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectSQLite3, openSQLite(t, path), dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// openSQLite opens the file at path as a service would (sqlitestore.DSN).
func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// sqliteCatalog is what SQLite's own catalog says of the tables (the tools' bookkeeping
// tables left out): tables with their WITHOUT ROWID and STRICT flags, columns with type,
// nullability, default and key position, indexes with uniqueness, origin and columns.
func sqliteCatalog(t *testing.T, db *sql.DB) catalog {
	t.Helper()
	var c catalog
	tables := `SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table'
		AND name NOT LIKE 'sqlite_%' AND name NOT IN (` + toolTables + `, 'atlas_schema_revisions')`
	c.Tables = lines(t, db, `SELECT name || ' | without rowid ' || wr || ' | strict ' || strict FROM pragma_table_list
		WHERE name IN (`+tables+`) ORDER BY name`)
	c.Columns = lines(t, db, `SELECT t.name || ' | ' || c.cid || ' | ' || c.name || ' | ' || c.type || ' | not null ' || c."notnull" ||
			' | ' || coalesce(c.dflt_value, 'no default') || ' | pk ' || c.pk
		FROM (`+tables+`) t, pragma_table_xinfo(t.name) c ORDER BY t.name, c.cid`)
	c.Indexes = lines(t, db, `SELECT t.name || ' | ' || i.name || ' | unique ' || i."unique" || ' | ' || i.origin || ' | ' ||
			(SELECT group_concat(coalesce(ii.name, '(rowid)'), ', ') FROM pragma_index_info(i.name) ii)
		FROM (`+tables+`) t, pragma_index_list(t.name) i ORDER BY t.name, i.name`)
	return c
}

func TestSQLiteMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newStore := func(db *sql.DB) *sqlitestore.Store {
		store, err := sqlitestore.New(db, sqlitestore.Config{})
		require.NoError(t, err)
		return store
	}
	// The reference: what schema/sqlite.sql creates.
	refDB := openSQLite(t, filepath.Join(t.TempDir(), "ref.db"))
	require.NoError(t, newStore(refDB).CreateSchema(ctx))
	want := sqliteCatalog(t, refDB)
	require.Len(t, want.Tables, 4, "schema/sqlite.sql creates the inbox table, its attempts table, the offsets table and the version table")
	require.NotEmpty(t, want.Indexes)

	for _, tl := range sqliteTools {
		t.Run(tl.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.db")
			db := openSQLite(t, path)
			_, err := inbox.New(inbox.Config{Store: newStore(db)})
			require.ErrorIs(t, err, inbox.ErrNoTable, "an empty database has no inbox")
			require.ErrorIs(t, newStore(db).VerifyOffsets(ctx), inbox.ErrNoTable, "nor offsets")

			require.NoError(t, tl.up(t, path))
			require.Equal(t, want, sqliteCatalog(t, db), "the migrations make what schema/sqlite.sql makes")
			require.Equal(t, versionRows(t, refDB, func(s string) string { return `"` + s + `"` }), versionRows(t, db, func(s string) string { return `"` + s + `"` }),
				"the migrations record the versions schema/sqlite.sql records")
			_, err = inbox.New(inbox.Config{Store: newStore(db)})
			require.NoError(t, err, "inbox.New accepts the migrated tables")
			require.NoError(t, newStore(db).VerifyOffsets(ctx), "and offset mode its offsets table")

			if tl.down == nil {
				return
			}
			require.NoError(t, tl.down(t, path))
			require.Empty(t, sqliteCatalog(t, db).Tables, "down removes the tables")
			require.NoError(t, tl.up(t, path))
			require.Equal(t, want, sqliteCatalog(t, db), "up again after down")
		})
	}

	t.Run("adopting tables CreateSchema made", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "app.db")
		db := openSQLite(t, path)
		require.NoError(t, newStore(db).CreateSchema(ctx))
		err := sqliteTools[0].up(t, path)
		require.False(t, err != nil && !errors.Is(err, migrate.ErrNoChange), "version 1 runs on existing tables: %v", err)
		require.Equal(t, want, sqliteCatalog(t, db))
	})
}
