package feedbuild

import (
	"net/netip"
	"strings"

	"golang.org/x/net/idna"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// idnaProfile turns a Unicode name into A-labels the way a resolver would
// look it up (UTS #46 non-transitional mapping: case and width folding,
// NFC), and refuses what such a lookup refuses: disallowed runes, STD3
// violations, Bidi rule and joiner violations, labels and names too long.
// Hyphen checks are off because real names such as
// r3---sn-apo3qvuoxuxbt-j5pe.googlevideo.com put "--" in positions 3–4.
// The profile is immutable, so sharing it is not mutable package state.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.BidiRule(),
	idna.VerifyDNSLength(true),
	idna.CheckHyphens(false),
)

// maxPath bounds a path entry. Real list paths are far shorter; a longer one
// is a broken line, and a node keeps every path in memory.
const maxPath = 4096

// normalizeName turns a name as a list writes it into the feed's form
// (feed.CheckName: lower-case A-labels, no trailing dot), or says why it
// cannot: CauseIP, CauseSingleLabel or CauseInvalidName.
//
// ASCII names are lower-cased and checked by feed.CheckName, which allows
// '_' (real names use it; STD3 does not), and each "xn--" label must be
// valid Punycode of a valid U-label. Names with any non-ASCII byte go
// through idnaProfile, whose STD3 rules then refuse '_'.
func normalizeName(s string) (string, Cause) {
	s = strings.TrimSuffix(s, ".") // the absolute form names the same domain
	if s == "" {
		return "", CauseInvalidName
	}
	if isIP(s) {
		return "", CauseIP
	}
	if isASCII(s) {
		s = strings.ToLower(s)
		if feed.CheckName(s) != nil {
			return "", CauseInvalidName
		}
		for label := range strings.SplitSeq(s, ".") {
			if strings.HasPrefix(label, "xn--") {
				if a, err := idnaProfile.ToASCII(label); err != nil || a != label {
					return "", CauseInvalidName
				}
			}
		}
	} else {
		a, err := idnaProfile.ToASCII(s)
		if err != nil || feed.CheckName(a) != nil {
			return "", CauseInvalidName
		}
		s = a
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

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
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
