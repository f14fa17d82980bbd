package resolver

import (
	"slices"
	"testing"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// TestNoteRoundTrip: a summary stored as a packet-cache note reads back
// the same; what is not a note reads as no decision.
func TestNoteRoundTrip(t *testing.T) {
	for _, s := range []Summary{
		{},
		{Verdict: policy.VerdictAllow, Action: policy.ActionAllow, Reason: policy.ReasonDefault},
		{Verdict: policy.VerdictBlock, Action: policy.ActionNXDomain, Reason: policy.ReasonCategory,
			Rule: "category:3 feed=threats key=bad.test via CNAME x.test", Categories: []uint16{3, 65535, 0},
			Policy: "0123456789abcdef"},
		{Verdict: policy.VerdictRedirect, Action: policy.ActionCNAME, Reason: policy.ReasonSafeSearch, Rule: "safe_search:google"},
	} {
		var got Summary
		if !readNote(&got, appendNote(nil, &s), nil) || got.Verdict != s.Verdict || got.Action != s.Action ||
			got.Reason != s.Reason || got.Rule != s.Rule || !slices.Equal(got.Categories, s.Categories) ||
			got.Policy != s.Policy {
			t.Errorf("%+v read back as %+v", s, got)
		}
	}
	for _, note := range [][]byte{nil, {1, 1, 1}, {9, 0, 0, 0}, {1, 1, 1, 2, 0, 3}, {1, 1, 1, 0}, {1, 1, 1, 0, 4, 'a'}} {
		var got Summary
		if readNote(&got, note, nil) || got.Verdict != "" || got.Rule != "" || len(got.Categories) != 0 {
			t.Errorf("%v read as %+v, want no decision", note, got)
		}
	}
}

// FuzzReadNote: any bytes read as a note or as none, without a panic; a
// note read writes again as one that reads the same.
func FuzzReadNote(f *testing.F) {
	f.Add([]byte{2, 2, 7, 1, 0, 3, 2, 'f', 'p', 'c'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, note []byte) {
		var s, again Summary
		if !readNote(&s, note, nil) {
			return
		}
		if !readNote(&again, appendNote(nil, &s), nil) || again.Verdict != s.Verdict || again.Action != s.Action ||
			again.Reason != s.Reason || again.Rule != s.Rule || !slices.Equal(again.Categories, s.Categories) ||
			again.Policy != s.Policy {
			t.Errorf("%v: read %+v, read again as %+v", note, s, again)
		}
	})
}
