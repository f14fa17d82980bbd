package feedbuild

import (
	"net/netip"
	"strings"
)

// Causes of the hosts importer.
const (
	CauseLocalName Cause = "local-name" // localhost and the other names every hosts file maps
	CauseNonSink   Cause = "non-sink"   // mapped to a real address: a redirect, not a block
)

// isLocalName reports whether a hosts file maps name (lower-case) for the
// machine itself: a blocking list that copies a system hosts file carries
// these, and none of them is something to block.
func isLocalName(name string) bool {
	switch name {
	case "localhost", "localhost.localdomain", "local", "localdomain", "broadcasthost",
		"ip6-localhost", "ip6-loopback", "ip6-localnet", "ip6-mcastprefix",
		"ip6-allnodes", "ip6-allrouters", "ip6-allhosts":
		return true
	}
	return strings.HasSuffix(name, ".localhost")
}

// isSink reports whether a hosts file maps names to a in order to block
// them: the unspecified and loopback addresses (0.0.0.0, 127.0.0.0/8, ::,
// ::1). Any other address redirects the name somewhere real — a hosts file
// for safe search or a local service, not a block list — and is not
// imported.
func isSink(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsUnspecified() || a.IsLoopback()
}

// parseHostsLine parses "IP name [name…] [# comment]". It returns the names
// to import (in the feed's form) and a cause for everything else; a
// comment or blank line gives neither names nor causes, except that a
// comment line counts once as CauseComment.
func parseHostsLine(line string) (names []string, skipped []Cause) {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		if strings.TrimSpace(line[:i]) == "" {
			return nil, []Cause{CauseComment}
		}
		line = line[:i]
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return nil, nil
	}
	addr, err := netip.ParseAddr(fields[0])
	if err != nil || len(fields) == 1 {
		// Not "IP name…": a domain list or a broken line. Never guess
		// which name of it was meant.
		return nil, []Cause{CauseMalformed}
	}
	sink := isSink(addr)
	for _, f := range fields[1:] {
		lower := strings.ToLower(strings.TrimSuffix(f, "."))
		switch {
		case isLocalName(lower):
			skipped = append(skipped, CauseLocalName)
		case !sink:
			skipped = append(skipped, CauseNonSink)
		case strings.HasPrefix(f, "*."):
			skipped = append(skipped, CauseWildcard)
		default:
			name, cause := normalizeName(f)
			if cause != "" {
				skipped = append(skipped, cause)
				continue
			}
			names = append(names, name)
		}
	}
	return names, skipped
}

type hostsImporter struct{}

func (hostsImporter) line(s string, st *Stats, emit func(Entry)) error {
	names, skipped := parseHostsLine(s)
	for _, c := range skipped {
		st.skip(c)
	}
	for _, n := range names {
		emit(Entry{Name: n})
	}
	return nil
}

func (hostsImporter) finish(*Stats, func(Entry)) error { return nil }
