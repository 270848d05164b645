package inbox_test

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The import rules of docs/architecture.md.

const module = "github.com/watermill-inbox/inbox"

// goList returns what `go list` prints for pkgs with the template format, a line each.
func goList(t *testing.T, format string, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-f", format}, pkgs...)...).Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}

func TestContractImportsOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	for _, dep := range goList(t, `{{join .Deps "\n"}}`, "./internal/contract") {
		first, _, _ := strings.Cut(dep, "/")
		require.NotContains(t, first, ".", "internal/contract imports %s: it is the bottom floor, the standard library only", dep)
	}
}

func TestStoresNeverImportTheRoot(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"./postgresstore", "./mysqlstore", "./sqlitestore", "./redisstore", "./internal/sqlstore"} {
		deps := goList(t, `{{join .Deps "\n"}}`, pkg)
		require.NotContains(t, deps, module, "%s imports the inbox package: a store implements internal/contract", pkg)
	}
}

// Only the entry points of the root import a store's package: the core reaches stores
// through the contract.
func TestOnlyTheEntryPointsImportAStore(t *testing.T) {
	t.Parallel()
	entryPoints := []string{"store_mysql.go", "store_postgres.go"}
	stores := regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `/(postgresstore|mysqlstore|sqlitestore|redisstore|internal/sqlstore)$`)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var importing []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if stores.MatchString(path) {
				importing = append(importing, name)
				break
			}
		}
	}
	extra := slices.DeleteFunc(importing, func(name string) bool { return slices.Contains(entryPoints, name) })
	// schema.go builds SQLiteSchema with internal/sqlstore's table helpers.
	extra = slices.DeleteFunc(extra, func(name string) bool { return name == "schema.go" })
	require.Empty(t, extra, "these root files import a store: only %v may", entryPoints)
}

// A program compiles only what it uses: the root package pulls in no SQLite driver, no
// Redis or SQLite store, no franz-go, OpenTelemetry or Prometheus.
func TestRootDependsOnNoOptionalPackage(t *testing.T) {
	t.Parallel()
	forbidden := regexp.MustCompile(`^(` + strings.Join([]string{
		regexp.QuoteMeta(module) + `/(sqlitestore|redisstore)`,
		`modernc\.org/(sqlite|libc)`, `github\.com/mattn/go-sqlite3`, `github\.com/ncruces/go-sqlite3`,
		`github\.com/twmb/`, `go\.opentelemetry\.io/`, `github\.com/prometheus/`, `github\.com/redis/`,
	}, "|") + `)`)
	for _, pkg := range []string{".", "./sqlitestore"} {
		for _, dep := range goList(t, `{{join .Deps "\n"}}`, pkg) {
			require.False(t, forbidden.MatchString(dep), "%s depends on %s: keep it out of the builds that do not ask for it", pkg, dep)
		}
	}
}

func TestArchitectureDocNamesEveryPackage(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/architecture.md")
	require.NoError(t, err)
	for _, pkg := range goList(t, `{{.ImportPath}}`, "./...") {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "" || strings.HasPrefix(rel, "_examples") || strings.HasPrefix(rel, "docs") {
			continue
		}
		if strings.HasPrefix(rel, "internal/") && !strings.Contains(string(doc), "`"+rel+"`") {
			rel = strings.TrimPrefix(rel, "internal/") // the "others" row names them by their last element
		}
		require.Contains(t, string(doc), "`"+rel, "docs/architecture.md does not name %s", pkg)
	}
}
