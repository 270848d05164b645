package inbox_test

import (
	"flag"
	"os"
	"runtime"
	"testing"
)

// TestMain sets the parallelism (waitBoundParallelism) and drops the tenant databases
// the tests created (helpers_tenants_test.go).
func TestMain(m *testing.M) {
	flag.Parse()
	waitBoundParallelism()
	code := m.Run()
	dropTenantDatabases()
	os.Exit(code)
}

// waitBoundParallelism runs 4 parallel tests at once, unless -parallel is given, where
// go test would run GOMAXPROCS (2 on CI's machine). The suite's cases wait on the
// servers far more than they compute (the network-fault axis: 108 s of wall time for
// 12 s of CPU), and with 2 at a time the package takes over 10 minutes with -race.
func waitBoundParallelism() {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < 4 {
		_ = flag.Set("test.parallel", "4")
	}
}
