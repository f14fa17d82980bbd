package httpapi

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendJSONString: whatever the bytes, AppendJSONString writes exactly
// what encoding/json writes with HTML escaping off (WriteJSON's encoder),
// so an appended body and a WriteJSON body never differ.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"uote", "back\\slash", "\x00\x1f\x7f\b\f\n\r\t", "é€😀", "\xff\xfe", "a\xe2\x82", "\u2028\u2029", "<&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		got := AppendJSONString([]byte("prefix"), s)
		if string(got) != "prefix"+string(bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Fatalf("%q: got %s, want %s", s, got[len("prefix"):], want.Bytes())
		}
	})
}
