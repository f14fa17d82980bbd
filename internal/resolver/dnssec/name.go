package dnssec

import (
	"strings"

	"github.com/miekg/dns"
)

// IsSubDomain is dns.IsSubDomain (child is parent or a name below it, ASCII
// case ignored) without its allocations: miekg/dns splits both names into
// new slices of label offsets on every call, and the recursor and the
// validator ask it a few dozen times per answer (bailiwick checks, the
// signer and proof owners): about a fifth of the allocations of a
// validated NXDOMAIN miss. Names in the usual form (fully qualified, no
// escapes, no empty label) are compared in place: the child ends with the
// parent at a label boundary; any other goes to miekg/dns.
func IsSubDomain(parent, child string) bool {
	if parent == "." {
		return true
	}
	if !plainName(parent) || !plainName(child) {
		return dns.IsSubDomain(parent, child)
	}
	if len(child) < len(parent) {
		return false
	}
	cut := len(child) - len(parent)
	if cut > 0 && child[cut-1] != '.' {
		return false
	}
	return foldEqual(child[cut:], parent)
}

// plainName: a fully qualified name other than the root, without escapes
// or empty labels, whose labels are the text between its dots.
func plainName(s string) bool {
	return len(s) > 1 && s[len(s)-1] == '.' && s[0] != '.' &&
		!strings.Contains(s, "..") && strings.IndexByte(s, '\\') < 0
}

// foldEqual compares as miekg/dns compares labels: ASCII letters
// without case, every other byte as it is.
func foldEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
