package access_test

import (
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/access"
)

// FuzzBearerToken: any header value is parsed or refused, never a panic;
// what it returns is a non-empty printable token without spaces, bounded
// in length, taken from the header's end.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"", "Bearer", "Bearer ", "Bearer x", "bearer  x", "BEARER x y", "Basic x", "Bearer \x00",
		"Bearer " + access.GenerateToken(), "Bearer " + strings.Repeat("a", 300), "Bearer\tx", "Bearer é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, err := access.BearerToken(h)
		if err != nil {
			if tok != "" {
				t.Fatalf("%q: token %q with error %v", h, tok, err)
			}
			return
		}
		if tok == "" || len(tok) > 256 || !strings.HasSuffix(h, tok) || !strings.EqualFold(h[:6], "bearer") {
			t.Fatalf("%q: token %q", h, tok)
		}
		for i := 0; i < len(tok); i++ {
			if tok[i] <= ' ' || tok[i] >= 0x7f {
				t.Fatalf("%q: token %q has byte %#x", h, tok, tok[i])
			}
		}
	})
}

// FuzzParseToken: a string is a token exactly when it is svcpf_, 16 and
// then 64 lowercase hex digits joined by _; its parts rebuild it.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"", access.GenerateToken(), "svcpf__", "svcpf_0123456789abcdef_" + strings.Repeat("0", 64),
		"svcpf_0123456789ABCDEF_" + strings.Repeat("0", 64), "svcpf_0123456789abcdef-" + strings.Repeat("0", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := access.ParseToken(s)
		if err != nil {
			if id != "" || secret != "" {
				t.Fatalf("%q: parts with an error", s)
			}
			return
		}
		if "svcpf_"+id+"_"+secret != s || len(s) != access.TokenLen || !access.ValidID(id) || len(secret) != 64 {
			t.Fatalf("%q parsed as %q %q", s, id, secret)
		}
		if strings.ToLower(s) != s {
			t.Fatalf("%q: upper case accepted", s)
		}
	})
}
