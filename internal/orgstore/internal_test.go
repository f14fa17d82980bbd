package orgstore

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
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
		if norm, err := normalizeMeta(meta); err == nil {
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
		got, err := normalizeMeta(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("normalizeMeta(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if got, err := normalizeMeta(nil); got != nil || err != nil {
		t.Errorf("normalizeMeta(nil) = %q, %v", got, err)
	}
	for _, in := range []string{``, `null`, `[]`, `1`, `"s"`, `{`, `{}{}`, "{\"a\":\"\xff\"}"} {
		if _, err := normalizeMeta(json.RawMessage(in)); err == nil {
			t.Errorf("normalizeMeta(%q) succeeded, want an error", in)
		}
	}
}

func TestParseURL(t *testing.T) {
	good := []struct {
		in, dialect, path string
	}{
		{"sqlite:data/orgmanager.db", DialectSQLite, "data/orgmanager.db"},
		{"sqlite:/var/lib/svc-pf/org.db", DialectSQLite, "/var/lib/svc-pf/org.db"},
		{"SQLite:x.db", DialectSQLite, "x.db"},
		{"sqlite:we#ird %20 name.db", DialectSQLite, "we#ird %20 name.db"},
		{"postgres://u:p@localhost:5432/db?sslmode=disable", DialectPostgres, ""},
		{"postgresql://localhost/db", DialectPostgres, ""},
	}
	for _, c := range good {
		tg, err := parseURL(c.in)
		if err != nil || tg.dialect != c.dialect || tg.path != c.path {
			t.Errorf("parseURL(%q) = %+v, %v", c.in, tg, err)
		}
		if c.dialect == DialectPostgres && tg.pg != c.in {
			t.Errorf("parseURL(%q).pg = %q", c.in, tg.pg)
		}
	}
	for _, in := range []string{"", "data.db", "mysql://x", "sqlite:", "sqlite::memory:", "sqlite:file:x.db",
		"sqlite:x.db?_pragma=foo", "sqlite:a\x00b", "sqlite:\xff", "postgres:db", "postgres://h:notaport/db"} {
		if tg, err := parseURL(in); err == nil {
			t.Errorf("parseURL(%q) = %+v, want an error", in, tg)
		}
	}
	_, err := parseURL("postgres://user:hunter2@h:notaport/db")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("parse error %v must not reveal the password", err)
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"sqlite:data/orgmanager.db", "sqlite:", "postgres://u:p@h:5432/db?sslmode=disable",
		"postgresql://h/db", "mysql://x", "sqlite:a?b", "postgres://[::1]:5432/db", "postgres://u:pw@h:99999/db"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// A password in a postgres URL never shows up in an error.
		const secret = "S3cr3tPassw0rd"
		if !strings.Contains(raw, secret) {
			for _, scheme := range []string{"postgres://u:", "postgresql://u:"} {
				if _, err := parseURL(scheme + secret + "@" + raw); err != nil && strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q reveals the password", err)
				}
			}
		}
		tg, err := parseURL(raw)
		if err != nil {
			return
		}
		switch tg.dialect {
		case DialectSQLite:
			if tg.path == "" || strings.ContainsAny(tg.path, "?\x00") || "sqlite:"+tg.path != "sqlite:"+raw[len("sqlite:"):] {
				t.Fatalf("parseURL(%q) = %+v", raw, tg)
			}
			// The file: URI built from it keeps the path in one piece.
			uri := sqliteURIPath("/base/" + tg.path)
			if strings.ContainsAny(uri, "?#") {
				t.Fatalf("sqliteURIPath(%q) = %q leaves a URI delimiter", tg.path, uri)
			}
		case DialectPostgres:
			if tg.pg != raw {
				t.Fatalf("parseURL(%q).pg = %q", raw, tg.pg)
			}
		default:
			t.Fatalf("parseURL(%q) = %+v: no dialect", raw, tg)
		}
	})
}

func TestKeyRoundTripAndOrder(t *testing.T) {
	ps := []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/0"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("10.0.0.0/9"),
		netip.MustParsePrefix("10.128.0.0/9"),
		netip.MustParsePrefix("255.255.255.255/32"),
		netip.MustParsePrefix("::/0"),
		netip.MustParsePrefix("::ffff:0.0.0.0/96"),
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("2001:db8::/128"),
		netip.MustParsePrefix("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"),
	}
	for i, p := range ps {
		k := prefixKey(p)
		got, err := decodeKey(k)
		if err != nil || got != p {
			t.Fatalf("decodeKey(prefixKey(%s)) = %s, %v", p, got, err)
		}
		if i > 0 {
			if string(prefixKey(ps[i-1])) >= string(k) || comparePrefix(ps[i-1], p) >= 0 {
				t.Fatalf("%s does not sort before %s", ps[i-1], p)
			}
		}
	}
	for _, bad := range [][]byte{nil, {4}, {4, 1, 2, 3, 4, 33}, {4, 10, 0, 0, 1, 8}, {5, 1, 2, 3, 4, 8}, make([]byte, 18)} {
		if p, err := decodeKey(bad); err == nil {
			t.Errorf("decodeKey(%x) = %s, want an error", bad, p)
		}
	}
}

func FuzzDecodeKey(f *testing.F) {
	f.Add([]byte{4, 10, 0, 0, 0, 8})
	f.Add(make([]byte, 18))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeKey(b)
		if err != nil {
			return
		}
		if !slices.Equal(prefixKey(p), b) {
			t.Fatalf("decodeKey(%x) = %s, which encodes as %x", b, p, prefixKey(p))
		}
	})
}

// TestOverlapLookups checks the two index lookups of findOverlap against
// netip's own Overlaps, exhaustively over a small address space.
func TestOverlapLookups(t *testing.T) {
	var all []netip.Prefix
	for bits := 0; bits <= 8; bits++ {
		for a := 0; a < 256; a += 1 << (8 - bits) {
			all = append(all, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a), 0, 0, 0}), bits))
		}
	}
	for _, p := range all {
		lo, hi := coveredKeyRange(p)
		anc := map[string]bool{}
		for _, k := range ancestorKeys(p) {
			anc[string(k)] = true
		}
		for _, q := range all {
			k := string(prefixKey(q))
			found := (k >= string(lo) && k <= string(hi)) || anc[k]
			if found != p.Overlaps(q) {
				t.Fatalf("p=%s q=%s: lookup says %v, Overlaps says %v", p, q, found, p.Overlaps(q))
			}
		}
	}
	// And across families nothing is found.
	lo, hi := coveredKeyRange(netip.MustParsePrefix("::/0"))
	if k := string(prefixKey(netip.MustParsePrefix("0.0.0.0/0"))); k >= string(lo) && k <= string(hi) {
		t.Fatal("::/0 range covers IPv4 keys")
	}
}

func TestPlanBatch(t *testing.T) {
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	up := func(c, u string) BatchOp {
		return BatchOp{Override: Override{CIDR: p(c), Attributes: identity.Attributes{Username: u}}}
	}
	del := func(c string) BatchOp { return BatchOp{Delete: true, Override: Override{CIDR: p(c)}} }
	deletes, upserts, err := planBatch([]BatchOp{
		up("10.0.0.0/24", "a"), del("10.0.0.0/24"),
		del("10.0.1.0/24"), up("10.0.1.0/24", "b"),
		up("10.0.2.0/24", "c1"), up("10.0.2.0/24", "c2"),
		up("10.0.3.0/24", "d1"), del("10.0.3.0/24"), up("10.0.3.0/24", "d2"), up("10.0.3.0/24", "d3"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var dels []string
	for _, k := range deletes {
		q, _ := decodeKey(k)
		dels = append(dels, q.String())
	}
	slices.Sort(dels)
	if want := []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.3.0/24"}; !slices.Equal(dels, want) {
		t.Fatalf("deletes = %v, want %v", dels, want)
	}
	var ups []string
	for _, r := range upserts {
		q, _ := decodeKey(r.key)
		ups = append(ups, q.String()+"="+r.username)
	}
	if want := []string{"10.0.1.0/24=b", "10.0.2.0/24=c2", "10.0.3.0/24=d3"}; !slices.Equal(ups, want) {
		t.Fatalf("upserts = %v, want %v", ups, want)
	}
}

func TestUnpackIdentity(t *testing.T) {
	key := prefixKey(netip.MustParsePrefix("2001:db8::/48"))
	var o Override
	if err := unpackIdentity(append(slices.Clone(key), "alice\x00mac:1\x00\x00tr"...), &o); err != nil {
		t.Fatal(err)
	}
	if o.CIDR.String() != "2001:db8::/48" || o.Username != "alice" || o.DeviceID != "mac:1" || o.Location != "" || o.TraceID != "tr" {
		t.Fatalf("unpacked %+v", o)
	}
	for _, bad := range [][]byte{
		nil,
		{4, 10},
		append(slices.Clone(key), "a\x00b\x00c"...),           // three fields
		append(slices.Clone(key), "a\x00b\x00c\x00d\x00e"...), // five fields
		append([]byte{9, 0, 0, 0, 0, 0}, "\x00\x00\x00"...),   // bad key
	} {
		if err := unpackIdentity(bad, &o); err == nil {
			t.Errorf("unpackIdentity(%q) succeeded", bad)
		}
	}
}
