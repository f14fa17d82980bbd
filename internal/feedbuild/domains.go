package feedbuild

import "strings"

// CauseAdblockRule is a line of adblock syntax in a domain list. Lists
// such as URLhaus's mix plain names with "||host/path^" rules; the domains
// importer takes the names and leaves the rules to the adblock importer run
// over the same file.
const CauseAdblockRule Cause = "adblock-rule"

// parseDomainsLine parses one line of a domain list: one name, '#' or '!'
// comments (and '#' after the name). It returns the name in the feed's
// form, or the cause of the skip; both empty for a blank line.
func parseDomainsLine(line string) (string, Cause) {
	line = strings.TrimSpace(line)
	switch {
	case line == "":
		return "", ""
	case line[0] == '#' || line[0] == '!':
		return "", CauseComment
	case line[0] == '|' || strings.HasPrefix(line, "@@") || strings.ContainsAny(line, "^$"):
		return "", CauseAdblockRule
	}
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = strings.TrimSpace(line[:i])
	}
	if strings.ContainsAny(line, " \t/") {
		// Two fields (a hosts line?) or a URL: not one name, and which part
		// was meant is a guess.
		return "", CauseMalformed
	}
	if strings.HasPrefix(line, "*.") {
		// "*.name" means the names under name but not name itself; the feed
		// can only say "name and everything under it".
		return "", CauseWildcard
	}
	return normalizeName(line)
}

type domainsImporter struct{}

func (domainsImporter) line(s string, st *Stats, emit func(Entry)) error {
	switch name, cause := parseDomainsLine(s); {
	case cause != "":
		st.skip(cause)
	case name != "":
		emit(Entry{Name: name})
	}
	return nil
}

func (domainsImporter) finish(*Stats, func(Entry)) error { return nil }
