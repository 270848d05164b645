package migratetest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"ariga.io/atlas/sql/migrate"
	atlasmysql "ariga.io/atlas/sql/mysql"
	atlaspostgres "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/sqltool"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/internal/sqltest"
)

// atlasDir reads a golang-migrate directory as the atlas CLI does with
// --dir "file://migrations/postgres?format=golang-migrate".
func atlasDir(t *testing.T, dialect string) *sqltool.GolangMigrateDir {
	t.Helper()
	dir, err := sqltool.NewGolangMigrateDir(filepath.Join("..", dialect))
	require.NoError(t, err)
	return dir
}

// The atlas.sum of each golang-migrate directory is the one atlas computes (atlas migrate
// hash), so atlas applies the directory as it is.
func TestAtlasSumIsCurrent(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql", "sqlite"} {
		dir := atlasDir(t, dialect)
		sum, err := dir.Checksum()
		require.NoError(t, err)
		if *update {
			require.NoError(t, migrate.WriteSumFile(dir, sum))
			continue
		}
		require.NoError(t, migrate.Validate(dir), "migrations/%s/atlas.sum is stale: run go test -update in migrations/migratetest", dialect)
	}
}

// atlasUp applies the golang-migrate directory with atlas's own executor, as
// atlas migrate apply does. Atlas has no down files: it plans reverts itself.
func atlasUp(t *testing.T, d sqltest.Database, dsn string) error {
	t.Helper()
	db := d.OpenDSN(t, dsn)
	open := atlaspostgres.Open
	if d.Dialect == sqltest.MySQL {
		open = atlasmysql.Open
	}
	drv, err := open(db)
	if err != nil {
		return err
	}
	// The revisions live in memory: the test checks the tables the files make, not
	// atlas's bookkeeping. WithAllowDirty: the namespace is new, but atlas would also
	// look at what the server's other tests left elsewhere.
	ex, err := migrate.NewExecutor(drv, atlasDir(t, dialectDir(d)), &revisions{}, migrate.WithAllowDirty(true))
	if err != nil {
		return err
	}
	return ex.ExecuteN(context.Background(), 0)
}

// revisions is an in-memory migrate.RevisionReadWriter.
type revisions struct {
	mu   sync.Mutex
	revs []*migrate.Revision
}

func (r *revisions) Ident() *migrate.TableIdent {
	return &migrate.TableIdent{Name: "atlas_schema_revisions"}
}

func (r *revisions) ReadRevisions(context.Context) ([]*migrate.Revision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*migrate.Revision(nil), r.revs...), nil
}

func (r *revisions) ReadRevision(_ context.Context, v string) (*migrate.Revision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rev := range r.revs {
		if rev.Version == v {
			return rev, nil
		}
	}
	return nil, migrate.ErrRevisionNotExist
}

func (r *revisions) WriteRevision(_ context.Context, rev *migrate.Revision) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, old := range r.revs {
		if old.Version == rev.Version {
			r.revs[i] = rev
			return nil
		}
	}
	r.revs = append(r.revs, rev)
	return nil
}

func (r *revisions) DeleteRevision(_ context.Context, v string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rev := range r.revs {
		if rev.Version == v {
			r.revs = append(r.revs[:i], r.revs[i+1:]...)
			return nil
		}
	}
	return nil
}
