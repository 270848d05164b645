// Package docs_test checks the repository's Markdown: every relative link and image in
// README.md, docs/ and the other Markdown files names a file or folder that exists, and
// every #fragment names a heading (or an HTML anchor) of the page it points to. It is a
// test-only package, so `go test ./...` from the module root runs it.
package docs_test

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository root, seen from this folder.
const root = ".."

// skipDirs are never searched for Markdown files.
var skipDirs = map[string]bool{".git": true, "vendor": true, "node_modules": true}

// TestRelativeLinksResolve reports every relative link whose file, folder or heading is
// missing, with its file and line.
func TestRelativeLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files under %s: is the walk broken?", len(files), root)
	}
	anchors := map[string]map[string]bool{} // cleaned path -> anchors, parsed once
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(src))
		anchors[path] = a
		return a, nil
	}
	checked := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range links(string(src)) {
			target, ok := relativeTarget(l.target)
			if !ok {
				continue
			}
			checked++
			path, fragment, _ := strings.Cut(target, "#")
			path, err := url.PathUnescape(path)
			if err != nil {
				t.Errorf("%s:%d: %s: %v", rel, l.line, l.target, err)
				continue
			}
			resolved := file
			switch {
			case path == "":
				// a fragment of this page
			case strings.HasPrefix(path, "/"):
				resolved = filepath.Join(root, filepath.FromSlash(path)) // GitHub: from the repository root
			default:
				resolved = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
			}
			info, err := os.Stat(resolved)
			if err != nil {
				t.Errorf("%s:%d: %s: no such file or folder", rel, l.line, l.target)
				continue
			}
			if fragment == "" || info.IsDir() || !strings.HasSuffix(resolved, ".md") {
				continue // GitHub's line anchors (#L10) on source files are not checked
			}
			a, err := anchorsOf(filepath.Clean(resolved))
			if err != nil {
				t.Fatal(err)
			}
			if !a[strings.ToLower(fragment)] {
				t.Errorf("%s:%d: %s: no heading or anchor %q in %s", rel, l.line, l.target, fragment, filepath.Base(resolved))
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d relative links: is the parser broken?", checked)
	}
	t.Logf("checked %d relative links in %d Markdown files", checked, len(files))
}

// markdownFiles returns every *.md file under the repository root, outside skipDirs.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// relativeTarget returns a link's target without its angle brackets, and false for an
// absolute URL (scheme://..., mailto:...) or an empty target.
func relativeTarget(target string) (string, bool) {
	target = strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
	if target == "" || scheme.MatchString(target) {
		return "", false
	}
	return target, true
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// link is a link's target and the line it starts on (1-based).
type link struct {
	target string
	line   int
}

var (
	// inline matches [text](target) and ![alt](target), with an optional title; the text
	// may span lines and hold one level of brackets.
	inline = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// refDef matches a reference definition: [label]: target
	refDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)`)
)

// links returns the inline links, images and reference definitions of a Markdown text,
// leaving out those in fenced code blocks, code spans and HTML comments.
func links(src string) []link {
	text := prose(src)
	var out []link
	for _, re := range []*regexp.Regexp{inline, refDef} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			out = append(out, link{target: text[m[2]:m[3]], line: 1 + strings.Count(text[:m[0]], "\n")})
		}
	}
	return out
}

// prose returns src with fenced code blocks, code spans and HTML comments blanked out:
// their characters become spaces (line breaks stay), so offsets and lines still match.
func prose(src string) string {
	b := []byte(src)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
	}
	// Fenced code blocks: ``` or ~~~, indented up to three spaces, or more inside lists.
	var fence string
	offset := 0
	for _, line := range strings.SplitAfter(src, "\n") {
		trimmed := strings.TrimLeft(line, " \t")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = leadingRun(trimmed)
			blank(offset, offset+len(line))
		case fence != "":
			if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "" {
				fence = ""
			}
			blank(offset, offset+len(line))
		}
		offset += len(line)
	}
	s := string(b)
	// HTML comments.
	for from := 0; ; {
		start := strings.Index(s[from:], "<!--")
		if start < 0 {
			break
		}
		start += from
		end := strings.Index(s[start:], "-->")
		if end < 0 {
			end = len(s) - start
		} else {
			end += len("-->")
		}
		blank(start, start+end)
		s = string(b)
		from = start + end
	}
	// Code spans: a run of n backticks up to the next run of exactly n, within a
	// paragraph (a blank line ends the search; an unmatched run is literal text).
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		n := len(leadingRun(s[i:]))
		end := closingRun(s, i+n, n)
		if end < 0 {
			i += n
			continue
		}
		blank(i, end)
		s = string(b)
		i = end
	}
	return s
}

// leadingRun returns the run of s's first character at its start.
func leadingRun(s string) string {
	i := 1
	for i < len(s) && s[i] == s[0] {
		i++
	}
	return s[:i]
}

// closingRun returns the end of the first run of exactly n backticks at or after from,
// or -1 when a blank line or the end of s comes first.
func closingRun(s string, from, n int) int {
	for j := from; j < len(s); {
		if strings.HasPrefix(s[j:], "\n\n") {
			return -1
		}
		if s[j] != '`' {
			j++
			continue
		}
		run := len(leadingRun(s[j:]))
		if run == n {
			return j + run
		}
		j += run
	}
	return -1
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s[^>]*\b(?:id|name)\s*=\s*"([^"]+)"`)
	linkInText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// headingAnchors returns the anchors GitHub gives a Markdown page: one per heading (a
// repeated slug gets -1, -2, ...), and the id or name of every <a> tag.
func headingAnchors(src string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	add := func(heading string) {
		slug := Slug(heading)
		if n, ok := seen[slug]; ok {
			seen[slug] = n + 1
			slug = fmt.Sprintf("%s-%d", slug, n+1)
		} else {
			seen[slug] = 0
		}
		anchors[slug] = true
	}
	lines := strings.Split(prose(src), "\n")
	raw := strings.Split(src, "\n") // headings keep their code spans' text
	for i, line := range lines {
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			add(raw[i][strings.Index(line, "#"):])
			continue
		}
		if i > 0 && setextLine.MatchString(line) && strings.TrimSpace(lines[i-1]) != "" &&
			!strings.Contains(line, "|") && !atxHeading.MatchString(lines[i-1]) && !listItem.MatchString(lines[i-1]) {
			add(raw[i-1])
		}
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(prose(src), -1) {
		anchors[strings.ToLower(m[1])] = true
	}
	return anchors
}

var listItem = regexp.MustCompile(`^\s*(?:[-*+]|\d+[.)])\s`)

// Slug returns GitHub's anchor for a heading: the heading's text (without the leading
// #s, code backticks, emphasis and link targets) in lower case, with every character
// that is not a letter, a digit, an underscore, a hyphen or a space removed, and each
// space turned into a hyphen.
func Slug(heading string) string {
	h := strings.TrimSpace(heading)
	if m := atxHeading.FindStringSubmatch(h); m != nil {
		h = m[1]
	}
	h = linkInText.ReplaceAllString(h, "$1")
	h = strings.NewReplacer("`", "", "*", "").Replace(h)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	tests := []struct {
		name    string
		heading string
		want    string
	}{
		{name: "plain words", heading: "## Retention: how long to keep keys", want: "retention-how-long-to-keep-keys"},
		{name: "a number and a period", heading: "## 12. Batches and offset mode", want: "12-batches-and-offset-mode"},
		{name: "code backticks removed", heading: "## 8. HTTP: `inboxhttp`", want: "8-http-inboxhttp"},
		{name: "apostrophe dropped", heading: "## Network faults: the conformance suite's fault axis", want: "network-faults-the-conformance-suites-fault-axis"},
		{name: "hyphens kept", heading: "### Kafka consumer-group timeouts", want: "kafka-consumer-group-timeouts"},
		{name: "underscores kept", heading: "## `inbox_outcome` and `Config.RecentKeys`", want: "inbox_outcome-and-configrecentkeys"},
		{name: "slash and plus dropped", heading: "# Inbox + outbox: emitting messages", want: "inbox--outbox-emitting-messages"},
		{name: "dash between spaces", heading: "## MySQL 9.7 and MariaDB 10.11: what differs — briefly", want: "mysql-97-and-mariadb-1011-what-differs--briefly"},
		{name: "parentheses dropped", heading: "## Attempts (`MaxAttempts`)", want: "attempts-maxattempts"},
		{name: "closing hashes", heading: "## Stability ##", want: "stability"},
		{name: "emphasis dropped", heading: "## **Never** `InstantAck`", want: "never-instantack"},
		{name: "link text kept", heading: "## See [ADR 3](adr/0003-read-committed.md)", want: "see-adr-3"},
		{name: "non-ASCII letters kept", heading: "## Café × 2", want: "café--2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Slug(tt.heading); got != tt.want {
				t.Fatalf("Slug(%q) = %q, want %q", tt.heading, got, tt.want)
			}
		})
	}
}

func TestHeadingAnchors(t *testing.T) {
	page := "# Title\n\n## Setup\n\ntext\n\n```sh\n# not a heading\n```\n\n## Setup\n\n## Setup\n\n" +
		"Setext\n======\n\n| a | b |\n|---|---|\n\n<a id=\"permanent\"></a>\n"
	tests := []struct {
		name   string
		anchor string
		want   bool
	}{
		{name: "title", anchor: "title", want: true},
		{name: "first of a repeated heading", anchor: "setup", want: true},
		{name: "second gets -1", anchor: "setup-1", want: true},
		{name: "third gets -2", anchor: "setup-2", want: true},
		{name: "no fourth", anchor: "setup-3", want: false},
		{name: "a comment in a code block is no heading", anchor: "not-a-heading", want: false},
		{name: "setext heading", anchor: "setext", want: true},
		{name: "html anchor", anchor: "permanent", want: true},
	}
	anchors := headingAnchors(page)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := anchors[tt.anchor]; got != tt.want {
				t.Fatalf("anchor %q: got %v, want %v (anchors: %v)", tt.anchor, got, tt.want, anchors)
			}
		})
	}
}

func TestLinks(t *testing.T) {
	page := "See [a](a.md) and ![img](b.png \"title\").\n\n```go\nx := [y](z.md)\n```\n\n" +
		"Code `[c](c.md)` is not a link; [`d`](d.md#x) is.\n<!-- [e](e.md) -->\n" +
		"[wrapped\ntext](f.md)\n[ref]: g.md\n[abs](https://example.com/h.md)\n"
	tests := []struct {
		name   string
		target string
		line   int
	}{
		{name: "inline", target: "a.md", line: 1},
		{name: "image with a title", target: "b.png", line: 1},
		{name: "code in the text", target: "d.md#x", line: 7},
		{name: "text over two lines", target: "f.md", line: 9},
		{name: "absolute, found but skipped later", target: "https://example.com/h.md", line: 12},
		{name: "reference definition", target: "g.md", line: 11},
	}
	got := map[string]int{}
	for _, l := range links(page) {
		got[l.target] = l.line
	}
	if len(got) != len(tests) {
		t.Fatalf("links: got %v, want %d links", got, len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, ok := got[tt.target]
			if !ok || line != tt.line {
				t.Fatalf("link %q: got line %d (found %v), want line %d", tt.target, line, ok, tt.line)
			}
		})
	}
}
