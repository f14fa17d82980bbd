package feed

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	for _, c := range []struct {
		in    string
		delta bool
		want  Line
		err   string
	}{
		{in: "ads.example.com\t1", want: Line{Name: "ads.example.com", Codes: []uint16{1}}},
		{in: "example.com/a/b?x=1\t3,1,3", want: Line{Name: "example.com", Path: "/a/b?x=1", Codes: []uint16{1, 3}}},
		{in: "xn--bcher-kva.example\t65535", want: Line{Name: "xn--bcher-kva.example", Codes: []uint16{65535}}},
		{in: "_dmarc.example.com\t7", want: Line{Name: "_dmarc.example.com", Codes: []uint16{7}}},
		{in: "gone.example\t-", delta: true, want: Line{Name: "gone.example", Remove: true}},
		{in: "gone.example\t-", err: "removal in a snapshot"},
		{in: "example.com", err: "no tab"},
		{in: "Example.com\t1", err: "lower-case"},
		{in: "example.com.\t1", err: "ends with a dot"},
		{in: "a..b\t1", err: "empty label"},
		{in: "\t1", err: "empty name"},
		{in: strings.Repeat("a", 64) + ".com\t1", err: "longer than 63"},
		{in: "example.com\t65536", err: "0 to 65535"},
		{in: "example.com\t", err: "no code"},
		{in: "example.com\t1,", err: "not a number"},
		{in: "example.com/a b\t1", err: "space or control"},
	} {
		got, err := ParseLine([]byte(c.in), c.delta)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseLine(%q) = %v, want error %q", c.in, err, c.err)
			}
		case err != nil:
			t.Errorf("ParseLine(%q): %v", c.in, err)
		case !reflect.DeepEqual(got, c.want):
			t.Errorf("ParseLine(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestReadLinesStopsAtTheFirstBadLine(t *testing.T) {
	var got []string
	err := ReadLines(strings.NewReader("a.com\t1\n\nb.com\t2\nbad\nc.com\t3\n"), false, func(l Line) error {
		got = append(got, l.Key())
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("err = %v, want one naming line 4", err)
	}
	if !reflect.DeepEqual(got, []string{"a.com", "b.com"}) {
		t.Fatalf("lines before the error: %v", got)
	}
	stop := errors.New("stop")
	if err := ReadLines(strings.NewReader("a.com\t1\n"), false, func(Line) error { return stop }); err != stop {
		t.Fatalf("fn's error = %v, want it returned as it is", err)
	}
}

func TestManifestValidate(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	good := func() *Manifest {
		return &Manifest{V: 1, Name: "ads", Versions: []Version{
			{Version: 4, Type: TypeSnapshot, File: FileName(TypeSnapshot, 4), SHA256: sum},
			{Version: 5, Type: TypeDelta, File: FileName(TypeDelta, 5), SHA256: sum},
		}}
	}
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	if m := good(); m.Latest() != 5 || m.Versions[0].File != "snapshot_4.gz" {
		t.Fatalf("Latest %d, file %s", m.Latest(), m.Versions[0].File)
	}
	for name, mod := range map[string]func(*Manifest){
		"format":          func(m *Manifest) { m.V = 2 },
		"empty":           func(m *Manifest) { m.Versions = nil },
		"delta first":     func(m *Manifest) { m.Versions = m.Versions[1:] },
		"gap":             func(m *Manifest) { m.Versions[1].Version = 7 },
		"second snapshot": func(m *Manifest) { m.Versions[1].Type = TypeSnapshot },
		"path":            func(m *Manifest) { m.Versions[1].File = "../etc/passwd" },
		"sum":             func(m *Manifest) { m.Versions[0].SHA256 = "AB" },
		"zero":            func(m *Manifest) { m.Versions = m.Versions[:1]; m.Versions[0].Version = 0 },
	} {
		m := good()
		mod(m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

// FuzzParseLine: never a panic; what parses writes back to a line that
// parses to the same value.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{"a.com\t1", "a.com/x\t1,2", "a.com\t-", "xn--p1ai\t0", "a\t", "\t", "a.com/\t9"} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, line []byte, delta bool) {
		l, err := ParseLine(line, delta)
		if err != nil {
			return
		}
		out := AppendLine(nil, l)
		again, err := ParseLine(bytes.TrimSuffix(out, []byte("\n")), delta)
		if err != nil || !reflect.DeepEqual(l, again) {
			t.Fatalf("%q → %+v → %q → %+v, %v", line, l, out, again, err)
		}
	})
}

// FuzzDecodeManifest: never a panic; what decodes is valid.
func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(`{"v":1,"name":"x","versions":[{"version":1,"type":"snapshot","file":"snapshot_1.gz","sha256":"` + strings.Repeat("0", 64) + `","entries":1}]}`))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(data)
		if err == nil && m.Validate() != nil {
			t.Fatal("decoded an invalid manifest")
		}
	})
}

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.":                  "example.com",
		"bücher.example":                "xn--bcher-kva.example",
		"xn--bcher-kva.example":         "xn--bcher-kva.example",
		"ＥＸＡＭＰＬＥ.com":                   "example.com",
		"_dmarc.example.com":            "_dmarc.example.com",
		"r3---sn-abc.googlevideo.com":   "r3---sn-abc.googlevideo.com",
		"10.0.0.1":                      "",
		"::1":                           "",
		"":                              "",
		".":                             "",
		"a..b":                          "",
		"xn--zz.example":                "",
		"bad name.example":              "",
		strings.Repeat("a", 64) + ".io": "",
	} {
		got, err := NormalizeName(in)
		if want == "" {
			if err == nil {
				t.Errorf("NormalizeName(%q) = %q, want an error", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("NormalizeName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// FuzzNormalizeName: never a panic; whatever it returns is in the feed's
// form and normalizes to itself.
func FuzzNormalizeName(f *testing.F) {
	for _, s := range []string{"Example.COM.", "bücher.example", "xn--bcher-kva.example", "10.0.0.1", "a..b", "ß.de"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := NormalizeName(s)
		if err != nil {
			return
		}
		if err := CheckName(n); err != nil {
			t.Fatalf("%q → %q: %v", s, n, err)
		}
		if again, err := NormalizeName(n); err != nil || again != n {
			t.Fatalf("%q → %q → %q, %v", s, n, again, err)
		}
	})
}

func TestManifestCatchUp(t *testing.T) {
	sum := strings.Repeat("a", 64)
	v := func(n int64, typ string) Version {
		return Version{Version: n, Type: typ, File: FileName(typ, n), SHA256: sum}
	}
	good := Manifest{V: 1, Name: "t", Versions: []Version{v(5, "snapshot"), v(6, "delta")},
		CatchUp: []Version{v(4, "delta"), v(5, "delta")}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(m *Manifest){
		"catch-up not ending at the snapshot": func(m *Manifest) { m.CatchUp = []Version{v(3, "delta"), v(4, "delta")} },
		"catch-up snapshot":                   func(m *Manifest) { m.CatchUp = []Version{v(5, "snapshot")} },
		"catch-up path":                       func(m *Manifest) { m.CatchUp[1].File = "../x" },
		"catch-up sum":                        func(m *Manifest) { m.CatchUp[1].SHA256 = "x" },
		"no snapshot first":                   func(m *Manifest) { m.Versions[0].Type = "delta" },
	} {
		m := good
		m.CatchUp = slices.Clone(good.CatchUp)
		m.Versions = slices.Clone(good.Versions)
		mut(&m)
		if m.Validate() == nil {
			t.Errorf("%s: valid", name)
		}
	}
}
