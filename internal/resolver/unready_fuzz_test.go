package resolver_test

import (
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// FuzzParseUnreadyMode: resolver.unready takes "", open and closed, and
// refuses anything else with an error naming the key and the value.
func FuzzParseUnreadyMode(f *testing.F) {
	for _, s := range []string{"", "open", "closed", "Open", "open ", "half", "\x00", "clos", "closed\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := resolver.ParseUnreadyMode(s)
		switch s {
		case "", "open":
			if err != nil || m != resolver.UnreadyOpen {
				t.Fatalf("%q: %q %v", s, m, err)
			}
		case "closed":
			if err != nil || m != resolver.UnreadyClosed {
				t.Fatalf("%q: %q %v", s, m, err)
			}
		default:
			if err == nil || m != "" || !strings.HasPrefix(err.Error(), "unready: ") {
				t.Fatalf("%q accepted or badly refused: %q %v", s, m, err)
			}
		}
	})
}
