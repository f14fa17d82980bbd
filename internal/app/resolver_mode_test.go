package app

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
)

// TestResolverModeConfig: mode, dnssec, root_hints_file,
// trust_anchors_file and nta decode strictly, default as documented
// (forward; process in recursive mode), recursive mode needs no
// forwarders, loopback nameservers stay refused from YAML, and a bad value
// is refused naming its key.
func TestResolverModeConfig(t *testing.T) {
	dir := t.TempDir()
	hints := filepath.Join(dir, "root.hints")
	writeFile(t, hints, ". 3600000 NS a.root.test.\na.root.test. 3600000 A 192.0.2.1\n")
	anchors := filepath.Join(dir, "anchors")
	writeFile(t, anchors, ". IN DS 20326 8 2 E06D44B80B8F1D39A95C0B0D7C65D08458E880409BBC683457104237C7F8EC8D\n")

	parse := func(src string) (ResolverConfig, resolverSettings, error) {
		t.Helper()
		c := DefaultResolverConfig()
		if err := config.Decode([]byte(src), &c); err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		s, err := c.parse()
		return c, s, err
	}
	_, s, err := parse("forwarders: [127.0.0.1:5300]\n")
	if err != nil || s.mode != resolver.ModeForward {
		t.Fatalf("default: mode %v, err %v", s.mode, err)
	}
	_, s, err = parse("mode: recursive\n")
	if err != nil {
		t.Fatalf("recursive without forwarders: %v", err)
	}
	if s.mode != resolver.ModeRecursive || s.recursor.DNSSEC != recursor.ModeProcess || s.recursor.Hints != "" ||
		s.recursor.TrustAnchors != "" || s.recursor.QueryLoopback || len(s.forwarders) != 0 {
		t.Errorf("recursive defaults: %+v, forwarders %v", s.recursor, s.forwarders)
	}
	_, s, err = parse("mode: recursive\ndnssec: validate\nroot_hints_file: " + hints + "\ntrust_anchors_file: " + anchors +
		"\nnta: [broken.example, other.test.]\n")
	if err != nil {
		t.Fatal(err)
	}
	if s.recursor.DNSSEC != recursor.ModeValidate || !strings.Contains(s.recursor.Hints, "a.root.test.") ||
		!strings.Contains(s.recursor.TrustAnchors, "20326") || len(s.recursor.NTA) != 2 {
		t.Errorf("recursive keys: %+v", s.recursor)
	}
	_, s, err = parse("mode: recursive\nforward_zones:\n  - {zone: Corp.Example, forwarders: ['192.0.2.1', '192.0.2.2:5353']}\n" +
		"  - {zone: rec.example., forwarders: ['[2001:db8::1]:53'], recurse: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	if fz := s.recursor.ForwardZones; len(fz) != 2 || fz[0].Zone != "corp.example." || fz[0].Recurse ||
		fz[0].Servers[0].String() != "192.0.2.1:53" || fz[0].Servers[1].String() != "192.0.2.2:5353" || !fz[1].Recurse {
		t.Errorf("forward_zones: %+v", fz)
	}
	// In forward mode the same key, the same parser: the zones go to the
	// forward-mode resolver, not the recursor.
	_, s, err = parse("forwarders: [127.0.0.1:5300]\nforward_zones:\n  - {zone: Corp.Example, forwarders: ['192.0.2.1', '192.0.2.2:5353'], recurse: true}\n" +
		"  - {zone: dev.corp.example., forwarders: ['[2001:db8::1]:53']}\n")
	if err != nil {
		t.Fatal(err)
	}
	if fz := s.forwardZones; len(fz) != 2 || fz[0].Zone != "corp.example." || !fz[0].Recurse ||
		fz[0].Servers[0].String() != "192.0.2.1:53" || fz[0].Servers[1].String() != "192.0.2.2:5353" || fz[1].Recurse ||
		len(s.recursor.ForwardZones) != 0 {
		t.Errorf("forward mode's forward_zones: %+v, recursor's %+v", fz, s.recursor.ForwardZones)
	}
	// dont_query: unset, the recursor's default; a list replaces it (an
	// address is its own network); [] bars nothing.
	if _, s, err = parse("mode: recursive\n"); err != nil || s.recursor.DontQuery != nil {
		t.Errorf("dont_query unset: %v %v, want nil (the recursor's default)", s.recursor.DontQuery, err)
	}
	if _, s, err = parse("mode: recursive\ndont_query: [10.0.0.0/8, 192.0.2.7, 'fd00::1/8']\n"); err != nil ||
		fmt.Sprint(s.recursor.DontQuery) != "[10.0.0.0/8 192.0.2.7/32 fd00::/8]" {
		t.Errorf("dont_query: %v %v", s.recursor.DontQuery, err)
	}
	if _, s, err = parse("mode: recursive\ndont_query: []\n"); err != nil || s.recursor.DontQuery == nil || len(s.recursor.DontQuery) != 0 {
		t.Errorf("dont_query []: %#v %v, want an empty list", s.recursor.DontQuery, err)
	}
	// No YAML key reaches the loopback switch.
	c := DefaultResolverConfig()
	if err := config.Decode([]byte("mode: recursive\nquery_loopback: true\n"), &c); err == nil {
		t.Error("query_loopback accepted from YAML")
	}

	for src, key := range map[string]string{
		"mode: recurse\n":                                                                                                             `mode: "recurse" is not forward or recursive`,
		"mode: recursive\ndnssec: strict\n":                                                                                           `dnssec: "strict" is not off, process or validate`,
		"mode: recursive\nroot_hints_file: /nonexistent\n":                                                                            "root_hints_file:",
		"mode: recursive\nroot_hints_file: " + anchors + "\n":                                                                         "root_hints_file:",
		"mode: recursive\ntrust_anchors_file: /nonexist\n":                                                                            "trust_anchors_file:",
		"mode: recursive\ntrust_anchors_file: " + hints + "\n":                                                                        "trust_anchors_file",
		"mode: recursive\nnta: ['bad..name']\n":                                                                                       "nta",
		"forwarders: [127.0.0.1:5300]\ndnssec: validate\n":                                                                            "only with mode: recursive",
		"forwarders: [127.0.0.1:5300]\nnta: [a.test]\n":                                                                               "only with mode: recursive",
		"forwarders: [127.0.0.1:5300]\ndont_query: [10.0.0.0/8]\n":                                                                    "dont_query: only with mode: recursive",
		"mode: recursive\ndont_query: [10.0.0.0/8, 'ten']\n":                                                                          `dont_query[1] "ten": want a network`,
		"forwarders: [127.0.0.1:5300]\nforward_zones: [{zone: corp.example}]\n":                                                       "forward_zones[0].forwarders: at least one",
		"forwarders: [127.0.0.1:5300]\nforward_zones: [{zone: 'a..b', forwarders: [192.0.2.1]}]\n":                                    `forward_zones[0].zone: "a..b" is not a domain name`,
		"forwarders: [127.0.0.1:5300]\nforward_zones: [{zone: c.example, forwarders: [192.0.2.1, '[::ffff:192.0.2.1]:53']}]\n":        `forward_zones[0].forwarders[1] "[::ffff:192.0.2.1]:53": 192.0.2.1:53 is listed twice for c.example.`,
		"mode: recursive\nforward_zones: [{zone: c.example, forwarders: [192.0.2.1, 192.0.2.1:53]}]\n":                                `forward_zones[0].forwarders[1] "192.0.2.1:53": 192.0.2.1:53 is listed twice`,
		"mode: recursive\nforward_zones: [{zone: 'a..b', forwarders: [192.0.2.1]}]\n":                                                 `forward_zones[0].zone: "a..b" is not a domain name`,
		"mode: recursive\nforward_zones: [{forwarders: [192.0.2.1]}]\n":                                                               `forward_zones[0].zone: "" is not a domain name`,
		"mode: recursive\nforward_zones: [{zone: corp.example}]\n":                                                                    "forward_zones[0].forwarders: at least one",
		"mode: recursive\nforward_zones: [{zone: corp.example, forwarders: [nope]}]\n":                                                `forward_zones[0].forwarders[0] "nope": want ip or ip:port`,
		"mode: recursive\nforward_zones: [{zone: corp.example, forwarders: ['0.0.0.0']}]\n":                                           `forward_zones[0].forwarders[0] "0.0.0.0": want a unicast address`,
		"mode: recursive\nforward_zones: [{zone: c.example, forwarders: [192.0.2.1]}, {zone: C.example., forwarders: [192.0.2.2]}]\n": "forward_zones[1].zone: c.example. is also forward_zones[0]'s",
	} {
		if _, _, err := parse(src); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: err %v, want one naming %s", src, err, key)
		}
	}
}
