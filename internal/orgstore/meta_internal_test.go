package orgstore

import (
	"encoding/json"
	"testing"
)

// referenceTraceID is the obvious, slow definition TraceID must agree with.
func referenceTraceID(meta []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(meta, &m) != nil {
		return ""
	}
	raw, ok := m["trace_id"]
	if !ok || len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

var traceIDCases = []struct {
	meta, want string
}{
	{``, ""},
	{`{}`, ""},
	{`{"trace_id":"abc"}`, "abc"},
	{` { "trace_id" : "abc" } `, "abc"},
	{`{"a":{"trace_id":"nested"},"b":[1,"x",{"c":"}"}]}`, ""},
	{`{"a":{"trace_id":"nested"},"trace_id":"top"}`, "top"},
	{`{"trace_id":42}`, ""},
	{`{"trace_id":null}`, ""},
	{`{"trace_id":["x"]}`, ""},
	{`{"trace_id":{"x":"y"}}`, ""},
	{`{"trace_id":true}`, ""},
	{`{"Trace_ID":"x"}`, ""},
	{`{"TRACE_ID":"x"}`, ""},
	{`{"trace_id ":"x"}`, ""},
	{`{"trace\u005fid":"esc"}`, "esc"},
	{`{"trace_id":"a\"b\\c\u00e9\n"}`, "a\"b\\c\u00e9\n"},
	{`{"trace_id":"first","trace_id":"last"}`, "last"},
	{`{"trace_id":"first","trace_id":1}`, ""},
	{`{"x":"trace_id"}`, ""},
	{`{"x":"\"trace_id\":\"fake\""}`, ""},
	{`["trace_id","x"]`, ""},
	{`"trace_id"`, ""},
	{`{"trace_id":"x"`, ""},
	{`{"trace_id":"x"} {}`, ""},
	{`{"trace_id":"x"}}`, ""},
	{`{"n":-1.5e3,"trace_id":"after number"}`, "after number"},
	{`{"n":[[[]]],"trace_id":"after arrays"}`, "after arrays"},
	{"{\"trace_id\":\"bad\xffutf8\"}", "bad\ufffdutf8"},
	{`{"trace_id":"\ud83d\ude00"}`, "😀"},
}

func TestTraceID(t *testing.T) {
	for _, c := range traceIDCases {
		if got := TraceID(json.RawMessage(c.meta)); got != c.want {
			t.Errorf("TraceID(%s) = %q, want %q", c.meta, got, c.want)
		}
		if ref := referenceTraceID([]byte(c.meta)); ref != c.want {
			t.Errorf("reference disagrees with the table on %s: %q", c.meta, ref)
		}
	}
}

func FuzzTraceID(f *testing.F) {
	for _, c := range traceIDCases {
		f.Add([]byte(c.meta))
	}
	f.Fuzz(func(t *testing.T, meta []byte) {
		got := TraceID(meta)
		if want := referenceTraceID(meta); got != want {
			t.Fatalf("TraceID(%q) = %q, reference %q", meta, got, want)
		}
		// What the store keeps (compact form) yields the same trace id.
		if norm, err := NormalizeMeta(meta); err == nil {
			if again := TraceID(norm); again != got {
				t.Fatalf("TraceID(compact %q) = %q, of original %q", norm, again, got)
			}
		}
	})
}

func TestNormalizeMeta(t *testing.T) {
	for in, want := range map[string]string{
		"{ \"a\" : [1, 2] ,\n\"b\":{} }": `{"a":[1,2],"b":{}}`,
		`{}`:                             `{}`,
		` {"x":"  spaced  "} `:           `{"x":"  spaced  "}`,
	} {
		got, err := NormalizeMeta(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("NormalizeMeta(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if got, err := NormalizeMeta(nil); got != nil || err != nil {
		t.Errorf("NormalizeMeta(nil) = %q, %v", got, err)
	}
	for _, in := range []string{``, `null`, `[]`, `1`, `"s"`, `{`, `{}{}`, "{\"a\":\"\xff\"}"} {
		if _, err := NormalizeMeta(json.RawMessage(in)); err == nil {
			t.Errorf("NormalizeMeta(%q) succeeded, want an error", in)
		}
	}
}
