package policy

import (
	"strings"
	"testing"
)

// The trace texts of Evaluate's identity and settings steps are what
// operators read: built without concatenation now, they must say exactly
// what the concatenations said.
func TestStepTexts(t *testing.T) {
	for _, ls := range [][]string{nil, {"global"}, {"global", "org:acme", "username:alice", "request"}} {
		want := "layers (none: defaults); fingerprint 0123abcd"
		if len(ls) > 0 {
			want = "layers " + strings.Join(ls, " < ") + "; fingerprint 0123abcd"
		}
		if got := settingsStep(ls, "0123abcd"); got != want {
			t.Errorf("settingsStep(%q) = %q, want %q", ls, got, want)
		}
	}
	for _, c := range []struct {
		s    Subject
		want string
	}{
		{Subject{By: ByNone}, "no session found: the global layer alone"},
		{Subject{By: ByIP, SessionID: "s1", Org: "acme"}, "by ip: session s1 of org acme"},
		{Subject{By: ByUsername, SessionID: "s1", Org: "acme", Others: []string{"s2", "s3"}},
			"by username: session s1 of org acme; also matched 2 other session(s): s2, s3"},
	} {
		if got := describeSubject(&c.s); got != c.want {
			t.Errorf("describeSubject(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}
