// Package cidr parses the CIDR strings that arrive over the orgmanager's REST
// API (query parameters, override bodies, prefix lists) into canonical
// netip.Prefix values, applying the organisation API's validation steps in
// their order (docs/orgmanager.md, rules and how they hold): syntax, prefix
// length, canonical form (host bits zero, IPv4 networks in IPv4 form). Prefix
// coverage is not its concern.
package cidr

import (
	"fmt"
	"net/netip"
	"strings"
)

// Error says why a CIDR was refused; its message is what API clients see.
type Error struct {
	Input  string
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid CIDR %q: %s", e.Input, e.Reason)
}

// maxInputLen bounds what is echoed back in error messages; the longest valid
// CIDR (a full IPv6 address in dotted-quad tail form plus /128) is 49 bytes.
const maxInputLen = 64

// Parse validates s and returns it as a masked prefix.
//
// An IPv4-mapped IPv6 network (::ffff:a.b.c.d/n, n ≥ 96) is refused as not
// canonical, naming its IPv4 form: every reader of addresses (the IP
// Mapper, each node's index, DNS client addresses from dual-stack sockets)
// sees those addresses as IPv4, while the prefix-overlap rule would compare
// it as IPv6, so one organisation's ::ffff:10.0.0.0/104 could claim the
// 10.0.0.0/8 another owns.
func Parse(s string) (netip.Prefix, error) {
	fail := func(reason string) (netip.Prefix, error) {
		in := s
		if len(in) > maxInputLen {
			in = in[:maxInputLen] + "…"
		}
		return netip.Prefix{}, &Error{Input: in, Reason: reason}
	}

	// Step 1: syntax. Parsed by hand rather than with netip.ParsePrefix so a
	// too-long prefix length gets step 2's message, not a syntax one.
	slash := strings.LastIndexByte(s, '/')
	if slash < 0 {
		return fail("not in address/length form")
	}
	addr, err := netip.ParseAddr(s[:slash])
	if err != nil {
		return fail("not a valid IP address")
	}
	if addr.Zone() != "" {
		return fail("zones are not allowed")
	}
	bits, ok := parseBits(s[slash+1:])
	if !ok {
		return fail("prefix length is not a decimal number")
	}

	// Step 2: prefix length for the family.
	if bits > addr.BitLen() {
		family := "IPv4"
		if addr.Is6() {
			family = "IPv6"
		}
		return fail(fmt.Sprintf("prefix length %d out of range 0..%d for %s", bits, addr.BitLen(), family))
	}

	// Step 3: canonical form.
	p := netip.PrefixFrom(addr, bits)
	if m := p.Masked(); m != p {
		return fail(fmt.Sprintf("host bits set; the network address form is %s", m))
	}
	if addr.Is4In6() && bits >= 96 {
		return fail(fmt.Sprintf("IPv4-mapped IPv6 network; the canonical form is %s", netip.PrefixFrom(addr.Unmap(), bits-96)))
	}
	return p, nil
}

// parseBits accepts 1..3 decimal digits without sign or leading zeros.
func parseBits(s string) (int, bool) {
	if s == "" || len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
