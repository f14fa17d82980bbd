package dnssec_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnssec"
)

var subDomainCases = [][2]string{
	{".", "."}, {".", "example."}, {"example.", "."}, {"example.", "example."}, {"example.", "EXAMPLE."},
	{"example.", "www.example."}, {"example.", "www.Example."}, {"example.", "wwwexample."},
	{"www.example.", "example."}, {"b.example.", "a.b.example."}, {"b.example.", "ab.example."},
	{"example", "www.example"}, {"example.", "www.example"}, {"ex\\.ample.", "a.ex\\.ample."},
	{"ample.", "ex\\.ample."}, {"a..b.", "x.a..b."}, {"", "x."}, {"x.", ""}, {"é.", "a.É."}, {"é.", "a.é."},
	{"*.example.", "a.*.example."}, {"nsec3.test.", "m1-2.nsec3.test."},
}

// TestIsSubDomain: dnssec.IsSubDomain answers as dns.IsSubDomain for plain
// names, case differences, label boundaries, escapes, empty labels,
// relative names and the root.
func TestIsSubDomain(t *testing.T) {
	for _, c := range subDomainCases {
		if got, want := dnssec.IsSubDomain(c[0], c[1]), dns.IsSubDomain(c[0], c[1]); got != want {
			t.Errorf("IsSubDomain(%q, %q) = %v, miekg/dns says %v", c[0], c[1], got, want)
		}
	}
	if !dnssec.IsSubDomain("Nsec3.Test.", "x.nsec3.TEST.") || dnssec.IsSubDomain("test.", "xtest.") {
		t.Error("the plain cases themselves are wrong")
	}
	if n := testing.AllocsPerRun(100, func() { dnssec.IsSubDomain("nsec3.test.", "m1-2.nsec3.test.") }); n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
}

// FuzzIsSubDomain: for any two strings, dnssec.IsSubDomain is
// dns.IsSubDomain.
func FuzzIsSubDomain(f *testing.F) {
	for _, c := range subDomainCases {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, parent, child string) {
		if got, want := dnssec.IsSubDomain(parent, child), dns.IsSubDomain(parent, child); got != want {
			t.Fatalf("IsSubDomain(%q, %q) = %v, miekg/dns says %v", parent, child, got, want)
		}
	})
}
