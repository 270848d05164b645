package inbox_test

import (
	"os"
	"testing"
)

// TestMain drops the tenant databases the tests created (helpers_tenants_test.go).
func TestMain(m *testing.M) {
	code := m.Run()
	dropTenantDatabases()
	os.Exit(code)
}
