package dnswire_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

func TestAppendNameTextMatchesMiekg(t *testing.T) {
	names := [][]byte{
		{0},
		wire("example", "com"),
		wire("a.b", "c d", `q"\`, "@;()'"),
		wire("\x00\x1f\x7f\xff", "é"),
	}
	for _, n := range names {
		want, _, err := dns.UnpackDomainName(n, 0)
		if err != nil {
			t.Fatalf("%q: %v", n, err)
		}
		if got := string(dnswire.AppendNameText(nil, n)); got != want {
			t.Errorf("%q: got %q, miekg %q", n, got, want)
		}
	}
}

func TestNameComparisons(t *testing.T) {
	com := wire("com")
	exampleCom := wire("example", "com")
	tests := []struct {
		name, zone []byte
		in         bool
	}{
		{exampleCom, com, true},
		{exampleCom, exampleCom, true},
		{wire("www", "example", "com"), exampleCom, true},
		{wire("xample", "com"), wire("ample", "com"), false},
		{com, exampleCom, false},
		{exampleCom, []byte{0}, true},
		{wire("example", "org"), com, false},
	}
	for _, tt := range tests {
		if got := dnswire.InZone(tt.name, tt.zone); got != tt.in {
			t.Errorf("InZone(%q, %q) = %v", tt.name, tt.zone, got)
		}
	}
	if !dnswire.EqualFoldName(wire("ExAmple", "COM"), exampleCom) || dnswire.EqualFoldName(wire("exbmple", "com"), exampleCom) {
		t.Error("EqualFoldName")
	}
	// '[' and '{' differ by 0x20 like letters but are not letters.
	if dnswire.EqualFoldName(wire("["), wire("{")) {
		t.Error("EqualFoldName folded a non-letter")
	}
	if !dnswire.IsLowerName(exampleCom) || dnswire.IsLowerName(wire("Example")) {
		t.Error("IsLowerName")
	}
}
