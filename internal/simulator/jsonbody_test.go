package simulator

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// stdJSON is httpapi.WriteJSON's encoding of v, without the newline.
func stdJSON(t *testing.T, v any) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// TestBodyOrder: the simulate body's keys come in the documented order,
// unknown keys after them sorted, and the bytes decode to the same value
// encoding/json's do.
func TestBodyOrder(t *testing.T) {
	body := map[string]any{
		"zz": 1, "vhost": "edge", "trace": []any{map[string]any{"result": "r", "step": "s"}},
		"fingerprint": "f", "answer": map[string]any{"ede": map[string]any{"text": "t", "code": 17}, "rcode": "NXDOMAIN"},
		"layers": []any{"global"}, "settings": map[string]any{"filtering": true, "action": "nxdomain"},
		"categories": []any{map[string]any{"match": "m", "feed": "f", "title": "t", "code": 3}},
		"identity":   map[string]any{"profile": nil, "by": "ip", "ip": "10.0.0.1"},
		"rule":       "r", "reason": "category", "action": "nxdomain", "verdict": "block", "domain": "a.example",
		"ratio": 0.5, "big": 1e21, "tiny": -1e-7, "strs": []string{"a<b>&", "\u2028"},
	}
	got, err := AppendBody(nil, CallSimulateUser, body)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"domain":"a.example","verdict":"block","action":"nxdomain","reason":"category","rule":"r",` +
		`"identity":{"by":"ip","ip":"10.0.0.1","profile":null},"categories":[{"code":3,"title":"t","feed":"f","match":"m"}],` +
		`"settings":{"action":"nxdomain","filtering":true},"layers":["global"],` +
		`"answer":{"rcode":"NXDOMAIN","ede":{"code":17,"text":"t"}},"fingerprint":"f","trace":[{"step":"s","result":"r"}],` +
		`"big":1e+21,"ratio":0.5,"strs":["a<b>&","\u2028"],"tiny":-1e-7,"vhost":"edge","zz":1}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	std, err := stdJSON(t, body)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(std, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("not the same value as encoding/json's:\n%s\n%s", got, std)
	}
	for _, bad := range []any{map[string]any{"x": struct{}{}}, []any{1.0, map[string]any{"n": json.Number("1")}}} {
		if _, err := AppendBody(nil, CallSimulateUser, bad); err == nil {
			t.Errorf("%v: want an error (httpapi.WriteJSON takes over)", bad)
		}
	}
}

// FuzzBodyEncoding: with no order to follow, the appender writes exactly
// encoding/json's bytes for any JSON value and any string (invalid UTF-8,
// control characters, U+2028 included), and refuses what encoding/json
// refuses.
func FuzzBodyEncoding(f *testing.F) {
	for _, s := range []struct{ doc, str string }{
		{`{"a":[1,2.5,-0.000001,1e300,true,null,"x\u0001\ty"],"b":{"c":{}}}`, "plain"},
		{`[]`, "\xff\xfe<>&\u2028\u2029\"\\\b\f\n\r\x00\x1f\x7f é 😀"},
		{`{"z":1,"a":2,"é":3,"":4}`, "\xed\xa0\x80"},
		{`1e21`, ""},
		{`123456789012345678901234567890`, "a"},
	} {
		f.Add(s.doc, s.str)
	}
	f.Fuzz(func(t *testing.T, doc, str string) {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			v = nil
		}
		for _, val := range []any{v, str, map[string]any{str: v, "k": []any{str, int64(len(str))}}} {
			got, err := AppendBody(nil, "", val)
			want, stdErr := stdJSON(t, val)
			if (err != nil) != (stdErr != nil) {
				t.Fatalf("%#v: appender error %v, encoding/json error %v", val, err, stdErr)
			}
			if err == nil && !bytes.Equal(got, want) {
				t.Fatalf("%#v:\n got %s\nwant %s", val, got, want)
			}
		}
	})
}
