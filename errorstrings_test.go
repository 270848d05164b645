package inbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// properNouns may begin an error string: names spelled with a capital whatever comes
// before them. Initialisms (NATS, PostgreSQL, MariaDB) need no entry: a second capital
// or a digit in the word lets it through, as in staticcheck.
var properNouns = map[string]bool{"Kafka": true, "Redis": true}

// The rule of staticcheck's ST1005, which staticcheck.conf turns off (ADR 131), checked
// here with the one exception staticcheck cannot see: an error string (errors.New,
// fmt.Errorf) neither ends with punctuation or a newline nor begins with a capital,
// unless its first word is a name declared in the repository (a Config field, which
// staticcheck does not know, often checked by a helper in another package; a type, a
// function) or a proper noun. In every Go file of the repository, nested modules and
// examples included; generated files are left out.
func TestErrorStringsFollowST1005(t *testing.T) {
	t.Parallel()
	type literal struct {
		pos  token.Position
		text string
	}
	names := map[string]bool{} // the names declared in the repository's files
	var texts []literal
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Field:
				for _, id := range n.Names {
					names[id.Name] = true
				}
			case *ast.TypeSpec:
				names[n.Name.Name] = true
			case *ast.ValueSpec:
				for _, id := range n.Names {
					names[id.Name] = true
				}
			case *ast.FuncDecl:
				names[n.Name.Name] = true
			case *ast.CallExpr:
				if text, ok := errorString(n); ok {
					texts = append(texts, literal{fset.Position(n.Args[0].Pos()), text})
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)

	var bad []string
	for _, lit := range texts {
		if why := st1005(lit.text, names); why != "" {
			bad = append(bad, lit.pos.String()+": "+why+": "+strconv.Quote(lit.text))
		}
	}
	require.Greater(t, len(texts), 100, "the walk found the repository's error strings")
	require.Empty(t, bad, "error strings: lowercase and no final punctuation, as Go's errors are (a Config field's or another declared name's first is the exception)")
}

// errorString returns the string literal that call passes to errors.New or fmt.Errorf.
func errorString(call *ast.CallExpr) (string, bool) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || len(call.Args) == 0 {
		return "", false
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok || !(pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf") {
		return "", false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	text, err := strconv.Unquote(lit.Value)
	return text, err == nil
}

// st1005 says what is wrong with an error string, or "".
func st1005(text string, declared map[string]bool) string {
	if text == "" {
		return ""
	}
	if last, _ := utf8.DecodeLastRuneInString(text); last == '\n' || strings.ContainsRune(".:!", last) {
		return "it ends with punctuation or a newline"
	}
	word, _, _ := strings.Cut(text, " ")
	first, n := utf8.DecodeRuneInString(word)
	if !unicode.IsUpper(first) {
		return ""
	}
	for _, r := range word[n:] {
		if unicode.IsUpper(r) || unicode.IsDigit(r) || r == '(' {
			return "" // an initialism, a name in camel case, a call
		}
	}
	word = strings.TrimRightFunc(word, unicode.IsPunct)
	if declared[word] || properNouns[word] {
		return ""
	}
	return "it begins with a capital"
}
