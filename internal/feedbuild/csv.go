package feedbuild

import (
	"strings"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// CauseBadCode is a csv line whose codes are not numbers from 0 to 65535
// (a header line counts here too).
const CauseBadCode Cause = "bad-code"

// parseCSVLine parses "domain[/path],code[;code…]": fields may be quoted
// with '"' and padded with spaces; '#' starts a comment line. It returns
// the entry with its codes, or the cause of the skip; both zero for a blank
// line.
func parseCSVLine(line string) (Entry, Cause) {
	line = strings.TrimSpace(line)
	switch {
	case line == "":
		return Entry{}, ""
	case line[0] == '#':
		return Entry{}, CauseComment
	}
	fields := strings.Split(line, ",")
	if len(fields) != 2 {
		return Entry{}, CauseMalformed
	}
	key, codeField := csvField(fields[0]), csvField(fields[1])
	host, path := key, ""
	if i := strings.IndexByte(key, '/'); i >= 0 {
		host, path = key[:i], key[i:]
	}
	if strings.HasPrefix(host, "*.") {
		return Entry{}, CauseWildcard
	}
	name, cause := normalizeName(host)
	if cause != "" {
		return Entry{}, cause
	}
	if path != "" && !checkPath(path) {
		return Entry{}, CauseBadPath
	}
	parts := strings.Split(codeField, ";")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	codes, err := feed.ParseCodes(strings.Join(parts, ","))
	if err != nil {
		return Entry{}, CauseBadCode
	}
	return Entry{Name: name, Path: path, Codes: codes}, ""
}

func csvField(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	return s
}

type csvImporter struct{}

func (csvImporter) line(s string, st *Stats, emit func(Entry)) error {
	switch e, cause := parseCSVLine(s); {
	case cause != "":
		st.skip(cause)
	case e.Name != "":
		emit(e)
	}
	return nil
}

func (csvImporter) finish(*Stats, func(Entry)) error { return nil }
