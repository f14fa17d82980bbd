package docs

import (
	"bufio"
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

// The repository's docs must stand on their own: every relative link in a
// Markdown file points at a file of the repository (and at a heading that
// exists, when it names one), and no doc leans on a document kept outside
// the repository — the architecture notes or the specs the project was
// first built against — instead of stating the contract in its own words.

func TestDocsStandAlone(t *testing.T) {
	root := repoRoot(t)
	docs := markdownFiles(t, root)
	if len(docs) < 10 {
		t.Fatalf("found %d Markdown files under %s; expected the repository's docs", len(docs), root)
	}
	headings := map[string]map[string]bool{} // file → its heading anchors
	anchorsOf := func(path string) map[string]bool {
		if h, ok := headings[path]; ok {
			return h
		}
		h := headingAnchors(t, path)
		headings[path] = h
		return h
	}
	links := 0
	for _, path := range docs {
		rel, _ := filepath.Rel(root, path)
		text := readFile(t, path)
		for _, target := range relativeLinks(text) {
			links++
			if msg := checkLink(root, path, target, anchorsOf); msg != "" {
				t.Errorf("%s: link %q: %s", rel, target, msg)
			}
		}
	}
	if links < 50 {
		t.Errorf("checked %d relative links in %d files; the docs link to each other far more: is the link parser broken?", links, len(docs))
	}
	yamls, err := filepath.Glob(filepath.Join(root, "docs", "openapi", "*.yaml"))
	if err != nil || len(yamls) == 0 {
		t.Fatalf("no OpenAPI documents under docs/openapi (%v)", err)
	}
	for _, path := range append(docs, yamls...) {
		rel, _ := filepath.Rel(root, path)
		for _, c := range outsideCitations(readFile(t, path)) {
			t.Errorf("%s:%d: %q leans on a document outside the repository; state the contract here or link to the doc that does", rel, c.line, c.text)
		}
	}
}

// TestOutsideCitations pins what counts as a citation of an outside
// document, and what does not (public standards by number).
func TestOutsideCitations(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{
		{"The format is DESIGN.md §6.2.", 2},
		{"see ../shared/DESIGN.md", 2},
		{"the REST API of spec 1 (`../shared/spec/1-organisation-manager.md`)", 2},
		{"reads them from `../shared/data/feeds/` beside the clone", 1},
		{"# The simulator (spec 2)", 1},
		{"Spec 3's API", 1},
		{"**Lookup** (§6.2): the name", 1},
		{"a TTL with the top bit set is 0 (RFC 2181 §8)", 0},
		{"no pipelining (RFC 7766\n  §6.2.1.1): one query", 0},
		{"(the RPZ Internet-Draft, draft-vixie-dnsop-dns-rpz, §6.1)", 0},
		{"the PowerDNS-compatible statistics API, as specified", 0},
		{"a spec 10 of its own", 0},
	} {
		if got := outsideCitations(tc.text); len(got) != tc.want {
			t.Errorf("outsideCitations(%q) = %v, want %d", tc.text, got, tc.want)
		}
	}
}

// TestHeadingAnchor pins the anchors GitHub gives headings, which the
// links' fragments are checked against.
func TestHeadingAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Organisation manager (`svc-pf orgmanager`)":           "organisation-manager-svc-pf-orgmanager",
		"Step 3: RPZ (`internal/rpz`)":                         "step-3-rpz-internalrpz",
		"Decisions where the organisation API leaves a choice": "decisions-where-the-organisation-api-leaves-a-choice",
		"The runtime and the latency tail":                     "the-runtime-and-the-latency-tail",
		"Deploy: a write reaching the nodes":                   "deploy-a-write-reaching-the-nodes",
	} {
		if got := headingAnchor(heading); got != want {
			t.Errorf("headingAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		dir = filepath.Dir(dir)
	}
	t.Fatal("no go.mod above the test's directory")
	return ""
}

func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	codeSpan   = regexp.MustCompile("``[^`]*``|`[^`\n]*`")
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// proseOf is a Markdown text without its fenced code blocks and code spans,
// where link syntax is only text.
func proseOf(text string) string {
	var b strings.Builder
	fence := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			b.WriteByte('\n')
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			b.WriteByte('\n')
			continue
		}
		b.WriteString(codeSpan.ReplaceAllString(line, ""))
		b.WriteByte('\n')
	}
	return b.String()
}

// relativeLinks are the link targets of a Markdown text that are not URLs
// with a scheme (https:, mailto:): files of the repository and fragments.
func relativeLinks(text string) []string {
	prose := proseOf(text)
	var out []string
	for _, re := range []*regexp.Regexp{inlineLink, refLink} {
		for _, m := range re.FindAllStringSubmatch(prose, -1) {
			if !scheme.MatchString(m[1]) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// checkLink says what is wrong with a relative link of the file at from,
// or "" when it resolves inside the repository.
func checkLink(root, from, target string, anchorsOf func(string) map[string]bool) string {
	pathPart, fragment, _ := strings.Cut(target, "#")
	dest := from
	if pathPart != "" {
		p, err := url.PathUnescape(pathPart)
		if err != nil {
			return "not a valid path: " + err.Error()
		}
		if strings.HasPrefix(p, "/") {
			return "absolute path: link relative to the file"
		}
		dest = filepath.Join(filepath.Dir(from), filepath.FromSlash(p))
		if rel, err := filepath.Rel(root, dest); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "points outside the repository"
		}
		if _, err := os.Stat(dest); err != nil {
			return "no such file in the repository"
		}
	}
	if fragment != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[fragment] {
		return fmt.Sprintf("no heading with the anchor #%s in %s", fragment, filepath.Base(dest))
	}
	return ""
}

// headingAnchors are the anchors of a Markdown file's headings, as GitHub
// makes them (a repeated heading gets -1, -2, …).
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(proseOfHeadings(readFile(t, path)), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if !strings.HasPrefix(trimmed, "#") {
			continue
		}
		text := strings.TrimLeft(trimmed, "#")
		if len(trimmed)-len(text) > 6 || (text != "" && text[0] != ' ') {
			continue
		}
		a := headingAnchor(strings.TrimSpace(text))
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// proseOfHeadings is the text outside fenced code blocks, code spans kept
// (a heading's code is part of its anchor).
func proseOfHeadings(text string) string {
	var b strings.Builder
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
		default:
			b.WriteString(line)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// headingAnchor is GitHub's anchor of a heading: lower case, letters,
// digits, '-' and '_' kept, spaces made '-', everything else dropped.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

type citation struct {
	line int
	text string
}

var (
	outsideDoc = regexp.MustCompile(`DESIGN\.md|\.\./shared\b|shared/spec\b|(?i:\bspecs? [1-3]\b)`)
	// A section sign cites a section; of a public standard (an RFC, an
	// Internet-Draft) it is fine, of anything else it points outside.
	sectionSign = regexp.MustCompile(`§\s*[0-9]`)
	standardRef = regexp.MustCompile(`(?:RFC\s*[0-9]+|draft-[a-z0-9-]+)[,:]?\s*$`)
)

// outsideCitations finds where a text leans on a document kept outside the
// repository.
func outsideCitations(text string) []citation {
	var out []citation
	lineOf := func(i int) int { return strings.Count(text[:i], "\n") + 1 }
	for _, m := range outsideDoc.FindAllStringIndex(text, -1) {
		out = append(out, citation{lineOf(m[0]), text[m[0]:m[1]]})
	}
	for _, m := range sectionSign.FindAllStringIndex(text, -1) {
		before := text[max(0, m[0]-60):m[0]]
		if !standardRef.MatchString(before) {
			out = append(out, citation{lineOf(m[0]), text[m[0]:m[1]]})
		}
	}
	return out
}
