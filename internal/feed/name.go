package feed

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// NormalizeName turns a domain as people and lists write it — any case, a
// trailing dot, Unicode — into the form feeds store and lookups use: lower-case
// IDNA A-labels without the trailing dot (CheckName). It refuses what a
// resolver's lookup would refuse, and IP addresses.
//
// ASCII names are lower-cased and checked by CheckName, which allows '_'
// (real names use it; STD3 does not); each "xn--" label must be valid
// Punycode of a valid U-label. Names with any non-ASCII byte go through
// UTS #46 non-transitional lookup mapping (case and width folding, NFC),
// whose STD3 rules then refuse '_'. Hyphen checks are off because real names
// such as r3---sn-apo3qvuoxuxbt-j5pe.googlevideo.com put "--" in positions
// 3–4.
func NormalizeName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".") // the absolute form names the same domain
	if s == "" {
		return "", errors.New("empty name")
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return "", fmt.Errorf("%q is an IP address, not a name", s)
	}
	if !isASCII(s) {
		if !utf8.ValidString(s) {
			return "", errors.New("name is not valid UTF-8")
		}
		a, err := lookupProfile().ToASCII(s)
		if err != nil {
			return "", fmt.Errorf("international name %q: %v", s, err)
		}
		s = a // and checked below like any ASCII name, so it is its own normal form
	}
	s = strings.ToLower(s)
	if err := CheckName(s); err != nil {
		return "", err
	}
	for label := range strings.SplitSeq(s, ".") {
		if strings.HasPrefix(label, "xn--") {
			if a, err := lookupProfile().ToASCII(label); err != nil || a != label {
				return "", fmt.Errorf("label %q is not valid Punycode of an international name", label)
			}
		}
	}
	return s, nil
}

// lookupProfile is built per call: idna profiles are cheap, and a package
// variable would be shared state.
func lookupProfile() *idna.Profile {
	return idna.New(
		idna.MapForLookup(),
		idna.Transitional(false),
		idna.BidiRule(),
		idna.VerifyDNSLength(true),
		idna.CheckHyphens(false),
	)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
