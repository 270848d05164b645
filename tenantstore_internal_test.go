package inbox

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Calls that find no entry for a new tenant all go on to open it, at once: the double
// check under the write lock gives them one entry and one Lookup. (The window between
// the read lock's miss and the write lock is too narrow for a test through the Store
// methods to hit reliably; here every caller is in it.)
func TestOpenIsOncePerTenant(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := NewPostgresStore(pool, PostgresConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var lookups atomic.Int32
	release := make(chan struct{})
	ts, err := NewTenantStore(TenantConfig{Lookup: func(context.Context, string) (Tenant, error) {
		lookups.Add(1)
		<-release
		return Tenant{Store: store}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	const callers = 50
	entries := make([]*tenantEntry, callers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			e, err := ts.open(context.Background(), "acme")
			if err != nil {
				t.Error(err)
			}
			entries[i] = e
		}()
	}
	close(start)
	wg.Wait()
	close(release)
	for i, e := range entries {
		if e != entries[0] {
			t.Fatalf("caller %d got an entry of its own", i)
		}
	}
	<-entries[0].ready
	if n := lookups.Load(); n != 1 {
		t.Fatalf("%d Lookups for one tenant, want 1", n)
	}
}
