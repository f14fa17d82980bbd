package feedbuild

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Source formats (the FORMAT of a FORMAT:CODE:PATH source).
const (
	FormatHosts   = "hosts"
	FormatDomains = "domains"
	FormatAdblock = "adblock"
	FormatRPZ     = "rpz"
	FormatCSV     = "csv"
)

// Formats lists the source formats, for usage and error messages.
func Formats() []string {
	return []string{FormatHosts, FormatDomains, FormatAdblock, FormatRPZ, FormatCSV}
}

// Cause is why an importer skipped a line or a name. docs/feeds.md lists
// which importer reports which cause, with examples.
type Cause string

// Causes shared by the importers.
const (
	CauseComment     Cause = "comment"      // a comment or header line
	CauseIP          Cause = "ip"           // an IP address, not a name
	CauseInvalidName Cause = "invalid-name" // not a valid domain name, also after IDNA
	CauseSingleLabel Cause = "single-label" // a TLD or local host name: would cover a whole TLD
	CauseWildcard    Cause = "wildcard"     // "*.name" where the format gives no meaning to it
	CauseMalformed   Cause = "malformed"    // a line the format cannot parse
	CauseBadPath     Cause = "bad-path"     // a path with a space or control byte, or too long
)

// Entry is one imported key. Codes is nil when the source's codes apply
// (every format but csv, whose lines carry their own).
type Entry struct {
	Name  string
	Path  string
	Codes []uint16
}

// Key is the entry's feed key, name[/path].
func (e Entry) Key() string { return e.Name + e.Path }

// Stats is what one importer did with one source: Imported entries (lines,
// or names of a hosts line, that gave a key; one key may be imported more
// than once) and Skipped ones by cause. Notes counts facts an operator
// should know that are neither (docs/feeds.md).
type Stats struct {
	Imported int
	Skipped  map[Cause]int
	Notes    map[string]int
}

func (s *Stats) skip(c Cause) {
	if s.Skipped == nil {
		s.Skipped = map[Cause]int{}
	}
	s.Skipped[c]++
}

func (s *Stats) note(n string) {
	if s.Notes == nil {
		s.Notes = map[string]int{}
	}
	s.Notes[n]++
}

// SkippedTotal is the number of skipped entries over all causes.
func (s *Stats) SkippedTotal() int {
	n := 0
	for _, c := range s.Skipped {
		n += c
	}
	return n
}

// Add adds o's counts to s.
func (s *Stats) Add(o Stats) {
	s.Imported += o.Imported
	for c, n := range o.Skipped {
		if s.Skipped == nil {
			s.Skipped = map[Cause]int{}
		}
		s.Skipped[c] += n
	}
	for k, n := range o.Notes {
		if s.Notes == nil {
			s.Notes = map[string]int{}
		}
		s.Notes[k] += n
	}
}

// String is one line: "imported N, skipped M (cause n, …)", causes by
// count, most first, then by name.
func (s *Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "imported %d, skipped %d", s.Imported, s.SkippedTotal())
	if len(s.Skipped) > 0 {
		b.WriteString(" (")
		b.WriteString(countList(s.Skipped))
		b.WriteString(")")
	}
	if len(s.Notes) > 0 {
		b.WriteString("; notes: ")
		b.WriteString(countList(s.Notes))
	}
	return b.String()
}

func countList[K ~string](m map[K]int) string {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b K) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Source is one FORMAT:CODE:PATH argument of `feed build`. PATH is a
// local file, or an http:// or https:// URL (IsURL), which the build
// fetches (fetch.go).
type Source struct {
	Format string
	Codes  []uint16 // nil for csv, whose lines carry their codes
	Path   string
}

// IsURL reports whether the source is fetched over HTTP(S) rather than
// read from a file.
func (s Source) IsURL() bool { return isURL(s.Path) }

func isURL(p string) bool {
	scheme, _, ok := strings.Cut(p, "://")
	return ok && (strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https"))
}

// Redacted is String with a URL's user and password hidden, for logs,
// metric labels and /health.
func (s Source) Redacted() string {
	if !s.IsURL() {
		return s.String()
	}
	u, err := url.Parse(s.Path)
	if err != nil || u.User == nil {
		return s.String()
	}
	return strings.TrimSuffix(s.String(), s.Path) + u.Redacted()
}

func (s Source) String() string {
	codes := "-"
	if s.Codes != nil {
		codes = joinCodes(s.Codes, ",")
	}
	return s.Format + ":" + codes + ":" + s.Path
}

// ParseSource parses FORMAT:CODE:PATH. CODE is a code (0–65535) or a
// comma-separated list of them; csv takes "-" (its lines carry the codes)
// and every other format a code. PATH is everything after the second colon,
// so it may contain colons; an http:// or https:// PATH is a URL and must
// name a host, and another SCHEME:// is refused rather than read as a file
// name.
func ParseSource(arg string) (Source, error) {
	format, rest, ok1 := strings.Cut(arg, ":")
	code, path, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || path == "" {
		return Source{}, fmt.Errorf("source %q: want FORMAT:CODE:PATH, e.g. adblock:1:easylist.txt or csv:-:list.csv", arg)
	}
	if !slices.Contains(Formats(), format) {
		return Source{}, fmt.Errorf("source %q: unknown format %q; use one of %s", arg, format, strings.Join(Formats(), ", "))
	}
	if err := checkSourceURL(path); err != nil {
		return Source{}, fmt.Errorf("source %q: %w", arg, err)
	}
	s := Source{Format: format, Path: path}
	switch {
	case format == FormatCSV && code != "-":
		return Source{}, fmt.Errorf("source %q: a csv source takes its codes from its lines; write csv:-:%s", arg, path)
	case format == FormatCSV:
	case code == "-":
		return Source{}, fmt.Errorf("source %q: a %s source needs a category code, e.g. %s:1:%s", arg, format, format, path)
	default:
		codes, err := feed.ParseCodes(code)
		if err != nil {
			return Source{}, fmt.Errorf("source %q: %w", arg, err)
		}
		s.Codes = codes
	}
	return s, nil
}

// checkSourceURL refuses a PATH that looks like a URL but is not one the
// build can fetch. A plain file name passes.
func checkSourceURL(p string) error {
	scheme, _, ok := strings.Cut(p, "://")
	if !ok || strings.ContainsAny(scheme, "/\\.") {
		return nil // a file name (a relative path may contain "://" after a slash)
	}
	if !isURL(p) {
		return fmt.Errorf("scheme %q is not supported: a source is a local file or an http:// or https:// URL", scheme)
	}
	u, err := url.Parse(p)
	switch {
	case err != nil:
		return fmt.Errorf("bad URL: %w", err)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("URL %q names no host", u.Redacted())
	case u.Fragment != "":
		return fmt.Errorf("URL %q has a #fragment, which is never sent to the server; remove it", u.Redacted())
	}
	return nil
}

// Import reads the source's file with its format's importer, calling add
// for every entry (with the codes filled in) and returning the counts.
func Import(src Source, add func(Entry)) (Stats, error) {
	f, err := os.Open(src.Path)
	if err != nil {
		return Stats{}, fmt.Errorf("source %s: %w", src, err)
	}
	defer f.Close()
	st, err := ImportReader(src.Format, src.Codes, f, add)
	if err != nil {
		return st, fmt.Errorf("source %s: %w", src, err)
	}
	return st, nil
}

// ImportReader is Import over a reader.
func ImportReader(format string, codes []uint16, r io.Reader, add func(Entry)) (Stats, error) {
	var st Stats
	emit := func(e Entry) {
		if e.Codes == nil {
			e.Codes = codes
		}
		st.Imported++
		add(e)
	}
	var imp importer
	switch format {
	case FormatHosts:
		imp = &hostsImporter{}
	case FormatDomains:
		imp = &domainsImporter{}
	case FormatAdblock:
		imp = newAdblockImporter()
	case FormatRPZ:
		// A zone file is read whole, by the node's zone parser.
		err := importRPZ(r, &st, emit)
		return st, err
	case FormatCSV:
		imp = &csvImporter{}
	default:
		return Stats{}, fmt.Errorf("unknown format %q; use one of %s", format, strings.Join(Formats(), ", "))
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	n := 0
	for sc.Scan() {
		n++
		if err := imp.line(sc.Text(), &st, emit); err != nil {
			return st, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return st, fmt.Errorf("line %d is longer than %d bytes: not a filter list", n+1, maxLine)
		}
		return st, fmt.Errorf("line %d: %w", n+1, err)
	}
	if err := imp.finish(&st, emit); err != nil {
		return st, err
	}
	return st, nil
}

// maxLine bounds one source line; real lists stay far below.
const maxLine = 1 << 20

// importer is one format's parser. line handles one line: it skips (and
// counts) or emits; it returns an error only when the file cannot be
// imported faithfully at all. finish runs after the last line, for formats
// whose later lines change earlier ones (adblock's $badfilter and
// exceptions).
type importer interface {
	line(s string, st *Stats, emit func(Entry)) error
	finish(st *Stats, emit func(Entry)) error
}

func joinCodes(codes []uint16, sep string) string {
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprint(c)
	}
	return strings.Join(parts, sep)
}
