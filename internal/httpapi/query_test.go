package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestParseQuery: a well-formed query string is read as URL.Query reads
// it; a malformed pair is an error, not a pair dropped.
func TestParseQuery(t *testing.T) {
	for _, tt := range []struct {
		raw, err string
	}{
		{"a=1&b=x%20y&a=2", ""},
		{"", ""},
		{"ip=%ZZ", `invalid query string: invalid URL escape "%ZZ"`},
		{"domain=a.example&ip=%zz", "invalid URL escape"},
		{"a=1;b=2", "invalid semicolon separator"},
		{"%=1", "invalid URL escape"},
	} {
		r := httptest.NewRequest("GET", "/x?"+tt.raw, nil)
		q, err := ParseQuery(r.URL.RawQuery)
		if tt.err == "" {
			if err != nil || q.Encode() != r.URL.Query().Encode() {
				t.Errorf("%q: %v, %v; want %v", tt.raw, q, err, r.URL.Query())
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%q: %v, %v; want an error with %q", tt.raw, q, err, tt.err)
		}
	}
}
