package feed

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"strconv"
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
		"content sum":     func(m *Manifest) { m.Versions[0].ContentSHA256 = "AB" },
		"base sum":        func(m *Manifest) { m.Versions[1].BaseSHA256 = strings.Repeat("g", 64) },
		"broken chain": func(m *Manifest) {
			m.Versions[0].ContentSHA256, m.Versions[1].BaseSHA256 = strings.Repeat("1", 64), strings.Repeat("2", 64)
		},
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

// FuzzDecodeManifest: never a panic; what decodes is valid, and from any
// held version DeltasFrom either refuses or gives a run of deltas that
// starts on the held content, chains, and ends at the target.
func FuzzDecodeManifest(f *testing.F) {
	z, a, b, c := strings.Repeat("0", 64), strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	f.Add([]byte(`{"v":1,"name":"x","versions":[{"version":1,"type":"snapshot","file":"snapshot_1.gz","sha256":"`+z+`","entries":1}]}`), int64(1), "")
	f.Add([]byte(`{"v":1}`), int64(0), "")
	f.Add([]byte(`null`), int64(0), "")
	// With the lineage fields: a snapshot, a delta, and the catch-up deltas
	// written beside the snapshot.
	f.Add([]byte(`{"v":1,"name":"x","versions":[`+
		`{"version":4,"type":"snapshot","file":"snapshot_4.gz","sha256":"`+z+`","entries":2,"content_sha256":"`+b+`"},`+
		`{"version":5,"type":"delta","file":"delta_5.gz","sha256":"`+z+`","entries":1,"content_sha256":"`+c+`","base_sha256":"`+b+`"}],`+
		`"catch_up":[{"version":3,"type":"delta","file":"delta_3.gz","sha256":"`+z+`","entries":1,"content_sha256":"`+a+`","base_sha256":"`+z+`"},`+
		`{"version":4,"type":"delta","file":"delta_4.gz","sha256":"`+z+`","entries":1,"content_sha256":"`+b+`","base_sha256":"`+a+`"}]}`), int64(2), z)
	f.Add([]byte(`{"v":1,"name":"x","versions":[{"version":1,"type":"snapshot","file":"s","sha256":"`+z+`","content_sha256":"`+a+`"},`+
		`{"version":2,"type":"delta","file":"d","sha256":"`+z+`","base_sha256":"`+b+`"}]}`), int64(1), a)
	f.Fuzz(func(t *testing.T, data []byte, heldVersion int64, heldContent string) {
		m, err := DecodeManifest(data)
		if err != nil {
			return
		}
		if m.Validate() != nil {
			t.Fatal("decoded an invalid manifest")
		}
		held := Version{Version: heldVersion, ContentSHA256: heldContent}
		for n := 1; n <= len(m.Versions); n++ {
			target := m.Versions[n-1]
			run, cont := m.DeltasFrom(held, n)
			if cont != Continues {
				if run != nil {
					t.Fatalf("%v with deltas %v", cont, run)
				}
				continue
			}
			if len(run) == 0 {
				if held.Version != target.Version {
					t.Fatalf("nothing to apply from %d to %d", held.Version, target.Version)
				}
				continue
			}
			if held.ContentSHA256 == "" || run[0].BaseSHA256 != held.ContentSHA256 || run[0].Version != held.Version+1 {
				t.Fatalf("deltas %+v onto %+v", run[0], held)
			}
			for i, v := range run {
				if v.Type != TypeDelta || (i > 0 && (v.Version != run[i-1].Version+1 || checkChain(run[i-1], v, "") != nil)) {
					t.Fatalf("run %+v", run)
				}
			}
			if last := run[len(run)-1]; last.Version != target.Version || !sameContent(last, target) {
				t.Fatalf("run ends at %+v, target %+v", last, target)
			}
		}
	})
}

// TestDeltasFrom: deltas only onto the content they build on; a held
// version of another history, or one the manifest cannot vouch for, means
// the snapshot.
func TestDeltasFrom(t *testing.T) {
	z := strings.Repeat("0", 64)
	sum := func(c byte) string { return strings.Repeat(string(c), 64) }
	v := func(n int64, typ string, base, content byte) Version {
		x := Version{Version: n, Type: typ, File: FileName(typ, n), SHA256: sum(byte('0' + n))}
		if base != 0 {
			x.BaseSHA256 = sum(base)
		}
		if content != 0 {
			x.ContentSHA256 = sum(content)
		}
		return x
	}
	// History a→b→c→d, snapshot at 4 (content d), delta 5 (content e);
	// catch-up deltas 3 (b→c) and 4 (c→d).
	m := &Manifest{V: 1, Name: "t",
		Versions: []Version{v(4, TypeSnapshot, 0, 'd'), v(5, TypeDelta, 'd', 'e')},
		CatchUp:  []Version{v(3, TypeDelta, 'b', 'c'), v(4, TypeDelta, 'c', 'd')}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	old := &Manifest{V: 1, Name: "t", Versions: []Version{v(4, TypeSnapshot, 0, 0), v(5, TypeDelta, 0, 0)}}
	held := func(n int64, content byte) Version {
		x := Version{Version: n, SHA256: z}
		if content != 0 {
			x.ContentSHA256 = sum(content)
		}
		return x
	}
	withSum := func(x Version, s string) Version { x.SHA256 = s; return x }
	for _, tc := range []struct {
		name string
		m    *Manifest
		held Version
		n    int
		want Continuity
		run  string
	}{
		{"listed, same content", m, held(4, 'd'), 2, Continues, "5"},
		{"catch-up from 2", m, held(2, 'b'), 2, Continues, "3 4 5"},
		{"catch-up from 3", m, held(3, 'c'), 1, Continues, "4"},
		{"the target", m, held(5, 'e'), 2, Continues, ""},
		{"catch-up from another history", m, held(3, 'x'), 2, Diverged, ""},
		{"listed, another history", m, held(4, 'x'), 2, Diverged, ""},
		{"the target's version, another content", m, held(5, 'x'), 2, Diverged, ""},
		{"held without content", m, held(4, 0), 2, Unproven, ""},
		{"too old", m, held(1, 'a'), 2, Unlisted, ""},
		{"newer", m, held(6, 'f'), 2, Unlisted, ""},
		{"old manifest, deltas", old, withSum(held(4, 'd'), old.Versions[0].SHA256), 2, Unproven, ""},
		{"old manifest, the target with its file", old, withSum(held(5, 'e'), old.Versions[1].SHA256), 2, Continues, ""},
		{"old manifest, the target with another file", old, held(5, 'e'), 2, Diverged, ""},
	} {
		run, got := tc.m.DeltasFrom(tc.held, tc.n)
		var vs []string
		for _, x := range run {
			vs = append(vs, strconv.FormatInt(x.Version, 10))
		}
		if got != tc.want || strings.Join(vs, " ") != tc.run {
			t.Errorf("%s: %v %q, want %v %q", tc.name, got, vs, tc.want, tc.run)
		}
	}
}

// TestContentSHA256: the checksum of a key set, whatever the order of its
// lines, is the SHA-256 of its snapshot lines sorted by key.
func TestContentSHA256(t *testing.T) {
	lines := []Line{{Name: "b.com", Codes: []uint16{2}}, {Name: "a.com", Path: "/x", Codes: []uint16{1, 3}}, {Name: "a.com", Codes: []uint16{1}}}
	sum := sha256.Sum256([]byte("a.com\t1\na.com/x\t1,3\nb.com\t2\n"))
	if got := ContentSHA256(lines); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("ContentSHA256 = %s", got)
	}
	if lines[0].Name != "b.com" {
		t.Fatal("ContentSHA256 sorted its argument")
	}
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
		"catch-up chain": func(m *Manifest) {
			m.CatchUp[0].ContentSHA256, m.CatchUp[1].BaseSHA256 = strings.Repeat("1", 64), strings.Repeat("2", 64)
		},
		"catch-up not the snapshot's content": func(m *Manifest) {
			m.CatchUp[1].ContentSHA256, m.Versions[0].ContentSHA256 = strings.Repeat("1", 64), strings.Repeat("2", 64)
		},
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
