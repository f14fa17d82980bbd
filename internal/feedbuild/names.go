package feedbuild

import (
	"net/netip"
	"strings"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// maxPath bounds a path entry. Real list paths are far shorter; a longer one
// is a broken line, and a node keeps every path in memory.
const maxPath = 4096

// normalizeName turns a name as a list writes it into the feed's form
// (feed.NormalizeName: lower-case A-labels, no trailing dot), or says why it
// cannot: CauseIP, CauseSingleLabel or CauseInvalidName.
func normalizeName(s string) (string, Cause) {
	if isIP(strings.TrimSuffix(s, ".")) {
		return "", CauseIP
	}
	s, err := feed.NormalizeName(s)
	if err != nil {
		return "", CauseInvalidName
	}
	last := s[strings.LastIndexByte(s, '.')+1:]
	if allDigits(last) {
		// No top-level domain is numeric: this is a piece of an IP address
		// ("10.1.2") or garbage, never a name a list means.
		return "", CauseInvalidName
	}
	if !strings.Contains(s, ".") {
		// A single label is a top-level domain or a local host name. An
		// entry for it would cover a whole TLD by the lookup rule; no list
		// means that by a bare word, so it is skipped rather than guessed.
		return "", CauseSingleLabel
	}
	return s, ""
}

// isIP reports whether s is an IP address, IPv6 with or without brackets
// (and zone).
func isIP(s string) bool {
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// checkPath reports whether p (starting with '/') can be a feed path: what
// feed.ParseKey accepts, within maxPath.
func checkPath(p string) bool {
	if len(p) > maxPath || !strings.HasPrefix(p, "/") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}
