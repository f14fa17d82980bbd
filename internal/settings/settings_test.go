package settings

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the tests must not depend on the machine's zoneinfo
)

func TestParseValid(t *testing.T) {
	d, err := Parse([]byte(`{
		"filtering": true,
		"blocked_categories": [3, 1, 3],
		"allowlist": ["Example.COM.", "bücher.example"],
		"blocklist": ["ads.example"],
		"blocked_networks": ["10.0.0.0/8", "192.0.2.7", "::ffff:198.51.100.0/120", "2001:db8::1/32"],
		"safe_search": false,
		"paused": null,
		"action": {"type": "redirect", "a": ["192.0.2.1"], "aaaa": ["2001:db8::1"]},
		"schedules": [{"days": ["sat", "mon", "mon"], "from": "22:00", "to": "06:30", "tz": "Europe/Amsterdam", "blocked_categories": [7], "paused": true}],
		"profile": 2
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"filtering":true,"blocked_categories":[1,3],"allowlist":["example.com","xn--bcher-kva.example"],` +
		`"blocklist":["ads.example"],"blocked_networks":["10.0.0.0/8","192.0.2.7/32","198.51.100.0/24","2001:db8::/32"],` +
		`"safe_search":false,"action":{"type":"redirect","a":["192.0.2.1"],"aaaa":["2001:db8::1"]},` +
		`"schedules":[{"days":["mon","sat"],"from":"22:00","to":"06:30","tz":"Europe/Amsterdam","blocked_categories":[7],"paused":true}],"profile":2}`
	if got := d.String(); got != want {
		t.Fatalf("canonical form:\n got %s\nwant %s", got, want)
	}
	if d.Paused != nil {
		t.Error("null must leave a field unset")
	}
	if d, err := Parse([]byte(`{}`)); err != nil || d.String() != "{}" {
		t.Fatalf("empty document: %v, %v", d, err)
	}
	if d, err := Parse([]byte(`{"blocked_categories": [], "allowlist": []}`)); err != nil || d.String() != `{"blocked_categories":[],"allowlist":[]}` {
		t.Fatalf("empty lists must stay set (they replace the layer below): %v, %v", d, err)
	}
	if d, err := Parse([]byte(`{"action": {"type": "cname", "target": "Block.Example."}}`)); err != nil || d.Action.Target != "block.example" {
		t.Fatalf("cname action: %v, %v", d, err)
	}
}

func TestParseRefusals(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`[]`, "settings"},
		{`null`, "settings"},
		{`{"filtering": 1}`, "filtering"},
		{`{"filter": true}`, "filter"},
		{`{"blocked_categories": [1, 65536]}`, "blocked_categories[1]"},
		{`{"blocked_categories": [-1]}`, "blocked_categories[0]"},
		{`{"blocked_categories": ["1"]}`, "blocked_categories[0]"},
		{`{"blocked_categories": 1}`, "blocked_categories"},
		{`{"allowlist": ["ok.example", "bad name"]}`, "allowlist[1]"},
		{`{"blocklist": ["10.0.0.1"]}`, "blocklist[0]"},
		{`{"blocklist": [1]}`, "blocklist[0]"},
		{`{"blocked_networks": ["10.0.0.0/33"]}`, "blocked_networks[0]"},
		{`{"blocked_networks": ["fe80::1%eth0"]}`, "blocked_networks[0]"},
		{`{"safe_search": "yes"}`, "safe_search"},
		{`{"action": "nxdomain"}`, "action"},
		{`{"action": {}}`, "action.type"},
		{`{"action": {"type": "block"}}`, "action.type"},
		{`{"action": {"type": "nxdomain", "target": "x.example"}}`, "action.target"},
		{`{"action": {"type": "redirect"}}`, "action"},
		{`{"action": {"type": "redirect", "a": ["2001:db8::1"]}}`, "action.a[0]"},
		{`{"action": {"type": "redirect", "aaaa": ["192.0.2.1"]}}`, "action.aaaa[0]"},
		{`{"action": {"type": "cname"}}`, "action.target"},
		{`{"action": {"type": "cname", "target": "a..b"}}`, "action.target"},
		{`{"action": {"type": "drop", "ttl": 5}}`, `action."ttl"`},
		{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "09:00"}]}`, "schedules[0].tz"},
		{`{"schedules": [{"days": ["monday"], "from": "08:00", "to": "09:00", "tz": "UTC"}]}`, "schedules[0].days[0]"},
		{`{"schedules": [{"days": [], "from": "08:00", "to": "09:00", "tz": "UTC"}]}`, "schedules[0].days"},
		{`{"schedules": [{"days": ["mon"], "from": "8:00", "to": "09:00", "tz": "UTC"}]}`, "schedules[0].from"},
		{`{"schedules": [{"days": ["mon"], "from": "24:00", "to": "09:00", "tz": "UTC"}]}`, "schedules[0].from"},
		{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "09:60", "tz": "UTC"}]}`, "schedules[0].to"},
		{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "08:00", "tz": "UTC"}]}`, "schedules[0]"},
		{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "09:00", "tz": "Mars/Olympus"}]}`, "schedules[0].tz"},
		{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "09:00", "tz": "Local"}]}`, "schedules[0].tz"},
		{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "09:00", "tz": "UTC", "paused": 1}]}`, "schedules[0].paused"},
		{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "09:00", "tz": "UTC", "x": 1}]}`, `schedules[0]."x"`},
		{`{"profile": -1}`, "profile"},
		{`{"profile": 1.5}`, "profile"},
		{`{"profile": "1"}`, "profile"},
	} {
		_, err := Parse([]byte(c.body))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Parse(%s) = %v, want an error naming %q", c.body, err, c.field)
		}
	}
	long := `{"allowlist": [` + strings.Repeat(`"a.example",`, MaxListItems) + `"a.example"]}`
	if _, err := Parse([]byte(long)); err == nil {
		t.Error("a list over the limit was accepted")
	}
	var big strings.Builder
	big.WriteString(`{"allowlist": [`)
	for i := range MaxListItems - 1 {
		fmt.Fprintf(&big, `%q,`, fmt.Sprintf("%05d.%s.example", i, strings.Repeat("a", 50)))
	}
	big.WriteString(`"x.example"]}`)
	var fe *FieldError
	if _, err := Parse([]byte(big.String())); !errors.As(err, &fe) || fe.Field != "settings" || !strings.Contains(fe.Msg, "once canonical") {
		t.Errorf("a document over MaxDocumentBytes: %v", err)
	}
}

func TestMerge(t *testing.T) {
	doc := func(s string) *Document {
		d, err := Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	global := doc(`{"blocked_categories": [1], "action": {"type": "refused"}}`)
	org := doc(`{"blocked_categories": [2, 3], "profile": 1}`)
	profile := doc(`{"safe_search": true}`)
	user := doc(`{"blocked_categories": [], "allowlist": ["ok.example"]}`)
	e := Merge(Layer{LayerGlobal, global}, Layer{"org:acme", org}, Layer{"profile:1", profile},
		Layer{"location:hq", nil}, Layer{"username:alice", user})
	if got := *e.BlockedCategories; len(got) != 0 {
		t.Errorf("blocked_categories = %v: the username layer's empty list replaces the org's", got)
	}
	for field, want := range map[string]string{
		"blocked_categories": "username:alice", "allowlist": "username:alice", "safe_search": "profile:1",
		"action": LayerGlobal, "filtering": LayerDefault, "profile": "org:acme",
	} {
		if e.Origin[field] != want {
			t.Errorf("origin of %s = %q, want %q", field, e.Origin[field], want)
		}
	}
	if !*e.Filtering || e.Action.Type != ActionRefused || !*e.SafeSearch || *e.Profile != 1 {
		t.Errorf("merged: %s", e.Document.String())
	}
	if p, ok := ProfileOf(global, org, nil, user); !ok || p != 1 {
		t.Errorf("ProfileOf = %d, %v", p, ok)
	}

	// Equal policies, whatever their layers, lists' order or profile, share
	// a fingerprint; a different policy does not.
	a := Merge(Layer{LayerGlobal, doc(`{"blocklist": ["b.example", "a.example"], "profile": 1}`)})
	b := Merge(Layer{"org:x", doc(`{"blocklist": ["a.example", "b.example"]}`)}, Layer{"username:u", doc(`{"profile": 7}`)})
	c := Merge(Layer{LayerGlobal, doc(`{"blocklist": ["a.example"]}`)})
	if a.Fingerprint != b.Fingerprint || a.Fingerprint == c.Fingerprint || len(a.Fingerprint) != 16 {
		t.Errorf("fingerprints %s %s %s", a.Fingerprint, b.Fingerprint, c.Fingerprint)
	}
	if Merge().Fingerprint != Merge(Layer{LayerGlobal, doc(`{"filtering": true}`)}).Fingerprint {
		t.Error("setting a field to its default changed the fingerprint")
	}
}

func TestScheduleOpen(t *testing.T) {
	sched := func(days, from, to, tz string) *Schedule {
		d, err := Parse([]byte(`{"schedules": [{"days": [` + days + `], "from": "` + from + `", "to": "` + to + `", "tz": "` + tz + `"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		return &(*d.Schedules)[0]
	}
	at := func(tz, s string) time.Time {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	utcAt := func(s string) time.Time { return at("UTC", s) }
	for _, c := range []struct {
		name string
		s    *Schedule
		t    time.Time
		open bool
	}{
		{"school hours, inside", sched(`"mon","tue"`, "08:00", "15:30", "Europe/Amsterdam"), at("Europe/Amsterdam", "2026-11-23 08:00"), true},
		{"school hours, end is exclusive", sched(`"mon"`, "08:00", "15:30", "Europe/Amsterdam"), at("Europe/Amsterdam", "2026-11-23 15:30"), false},
		{"school hours, other day", sched(`"mon"`, "08:00", "15:30", "Europe/Amsterdam"), at("Europe/Amsterdam", "2026-11-24 09:00"), false},
		{"judged in the schedule's zone", sched(`"mon"`, "08:00", "15:30", "Europe/Amsterdam"), utcAt("2026-11-23 07:30"), true},
		{"judged in the schedule's zone, outside", sched(`"mon"`, "08:00", "15:30", "Europe/Amsterdam"), utcAt("2026-11-23 14:45"), false},
		{"night, evening part", sched(`"fri"`, "22:00", "06:00", "UTC"), utcAt("2026-11-27 23:59"), true},
		{"night, morning part belongs to the day before", sched(`"fri"`, "22:00", "06:00", "UTC"), utcAt("2026-11-28 05:59"), true},
		{"night, morning of a listed day that did not open the night before", sched(`"fri"`, "22:00", "06:00", "UTC"), utcAt("2026-11-27 05:00"), false},
		{"night, sunday into monday", sched(`"sun"`, "23:00", "01:00", "UTC"), utcAt("2026-11-30 00:30"), true},
		{"until 24:00", sched(`"mon"`, "20:00", "24:00", "UTC"), utcAt("2026-11-23 23:59"), true},
		{"until 24:00, next day", sched(`"mon"`, "20:00", "24:00", "UTC"), utcAt("2026-11-24 00:00"), false},
		// Europe/Amsterdam: 2026-03-29 02:00 CET → 03:00 CEST; 2026-10-25 03:00 CEST → 02:00 CET.
		{"AMS spring forward: the lost hour never opens", sched(`"sun"`, "02:00", "03:00", "Europe/Amsterdam"), time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), false},
		{"AMS spring forward: 03:00 local is 01:00 UTC", sched(`"sun"`, "03:00", "04:00", "Europe/Amsterdam"), time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), true},
		{"AMS spring forward: 01:59 UTC is 03:59 CEST", sched(`"sun"`, "03:00", "04:00", "Europe/Amsterdam"), time.Date(2026, 3, 29, 1, 59, 0, 0, time.UTC), true},
		{"AMS fall back: first 02:30", sched(`"sun"`, "02:00", "03:00", "Europe/Amsterdam"), time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), true},
		{"AMS fall back: second 02:30", sched(`"sun"`, "02:00", "03:00", "Europe/Amsterdam"), time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), true},
		{"AMS fall back: 03:00 CET closes", sched(`"sun"`, "02:00", "03:00", "Europe/Amsterdam"), time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC), false},
		{"AMS night across spring forward", sched(`"sat"`, "22:00", "07:00", "Europe/Amsterdam"), time.Date(2026, 3, 29, 4, 59, 0, 0, time.UTC), true},
		{"AMS night across spring forward, closed at 07:00 CEST", sched(`"sat"`, "22:00", "07:00", "Europe/Amsterdam"), time.Date(2026, 3, 29, 5, 0, 0, 0, time.UTC), false},
		// America/New_York: 2026-03-08 02:00 EST → 03:00 EDT; 2026-11-01 02:00 EDT → 01:00 EST.
		{"NYC spring forward: 02:30 does not exist", sched(`"sun"`, "02:00", "03:00", "America/New_York"), time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC), false},
		{"NYC spring forward: 03:30 EDT", sched(`"sun"`, "03:00", "04:00", "America/New_York"), time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC), true},
		{"NYC fall back: first 01:30 (EDT)", sched(`"sun"`, "01:00", "02:00", "America/New_York"), time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), true},
		{"NYC fall back: second 01:30 (EST)", sched(`"sun"`, "01:00", "02:00", "America/New_York"), time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC), true},
		{"NYC fall back: 02:00 EST closes", sched(`"sun"`, "01:00", "02:00", "America/New_York"), time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC), false},
		{"NYC night across fall back", sched(`"sat"`, "23:00", "06:00", "America/New_York"), time.Date(2026, 11, 1, 10, 59, 0, 0, time.UTC), true},
		{"NYC night across fall back, closed at 06:00 EST", sched(`"sat"`, "23:00", "06:00", "America/New_York"), time.Date(2026, 11, 1, 11, 0, 0, 0, time.UTC), false},
	} {
		if got := c.s.Open(c.t); got != c.open {
			t.Errorf("%s: Open(%s) = %v, want %v", c.name, c.t.In(c.s.loc).Format("Mon 2006-01-02 15:04 MST"), got, c.open)
		}
	}
}

// FuzzParse: never a panic; an accepted document renders to JSON that
// parses to the same canonical document.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"filtering":false}`, `{"blocked_categories":[1,2]}`,
		`{"allowlist":["a.example"],"action":{"type":"cname","target":"b.example"}}`,
		`{"schedules":[{"days":["mon"],"from":"22:00","to":"06:00","tz":"UTC","paused":true}]}`,
		`{"blocked_networks":["10.0.0.0/8","::1"],"action":{"type":"redirect","a":["192.0.2.1"]}}`, `{"profile":3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("error %v names no field", err)
			}
			return
		}
		again, err := Parse([]byte(d.String()))
		if err != nil || again.String() != d.String() {
			t.Fatalf("%s → %s → %v, %v", data, d.String(), again, err)
		}
	})
}

// TestMergeCompact: MergeCompact is Merge without the Origin map; OriginOf
// gives what Origin[field] gives, on either, for every field (and "" for a
// field that is not one), and the documents and fingerprints are equal.
func TestMergeCompact(t *testing.T) {
	doc := func(s string) *Document {
		d, err := Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	stacks := [][]Layer{
		nil,
		{{LayerGlobal, doc(`{"blocked_categories": [1], "action": {"type": "refused"}}`)}},
		{{LayerGlobal, doc(`{"blocklist": ["a.example"]}`)}, {"org:acme", doc(`{"blocked_categories": [2, 3], "profile": 1}`)},
			{"profile:1", doc(`{"safe_search": true, "paused": false}`)}, {"location:hq", nil},
			{"username:alice", doc(`{"blocked_categories": [], "allowlist": ["ok.example"], "blocked_networks": ["10.0.0.0/8"]}`)},
			{"deviceid:mac:01", doc(`{"filtering": false, "schedules": [], "profile": 2}`)}},
	}
	for i, ls := range stacks {
		full, compact := Merge(ls...), MergeCompact(ls...)
		if compact.Origin != nil {
			t.Errorf("stack %d: MergeCompact made an Origin map", i)
		}
		if full.Fingerprint != compact.Fingerprint || full.Document.String() != compact.Document.String() {
			t.Errorf("stack %d: %s %s, want %s %s", i, compact.Fingerprint, compact.Document.String(), full.Fingerprint, full.Document.String())
		}
		for _, f := range append(Fields(), "no_such_field") {
			if got, want := compact.OriginOf(f), full.Origin[f]; got != want {
				t.Errorf("stack %d: compact origin of %s = %q, want %q", i, f, got, want)
			}
			if got, want := full.OriginOf(f), full.Origin[f]; got != want {
				t.Errorf("stack %d: origin of %s = %q, want %q", i, f, got, want)
			}
		}
		if _, ok := full.Origin["profile"]; ok != (full.Profile != nil) {
			t.Errorf("stack %d: profile in Origin %v, with a profile set %v", i, ok, full.Profile != nil)
		}
	}
}

// TestFieldTable: the one table of fields names every field of Document in
// its order (the canonical JSON's), and each entry parses and merges its
// own field: a document that sets only that field gives that field, and no
// other, the layer's origin and the document's value.
func TestFieldTable(t *testing.T) {
	typ := reflect.TypeFor[Document]()
	if typ.NumField() != len(fields) {
		t.Fatalf("Document has %d fields, the table %d", typ.NumField(), len(fields))
	}
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if fields[i].name != name {
			t.Errorf("field %d: table %q, Document %q", i, fields[i].name, name)
		}
	}
	if fields[fProfile].name != "profile" || !slices.Equal(PolicyFields(), Fields()[:len(fields)-1]) {
		t.Fatalf("profile is not last: %v", Fields())
	}
	full, err := Parse([]byte(`{"filtering": false, "blocked_categories": [4], "allowlist": ["a.example"],
		"blocklist": ["b.example"], "blocked_networks": ["10.0.0.0/8"], "safe_search": true, "paused": true,
		"action": {"type": "nodata"}, "schedules": [{"days": ["mon"], "from": "01:00", "to": "02:00", "tz": "UTC", "paused": true}],
		"profile": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(full.String()), &raw); err != nil {
		t.Fatal(err)
	}
	for i, f := range fields {
		one, err := Parse([]byte(`{"` + f.name + `": ` + string(raw[f.name]) + `}`))
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if got, want := one.String(), `{"`+f.name+`":`+string(raw[f.name])+`}`; got != want {
			t.Errorf("%s parses to %s, want %s", f.name, got, want)
		}
		e := Merge(Layer{Name: "x", Doc: one})
		for j, g := range fields {
			want := LayerDefault
			switch {
			case j == i:
				want = "x"
			case j == fProfile:
				want = ""
			}
			if got := e.OriginOf(g.name); got != want || e.Origin[g.name] != want {
				t.Errorf("a document of %s alone: %s from %q (map %q), want %q", f.name, g.name, got, e.Origin[g.name], want)
			}
		}
		var merged map[string]json.RawMessage
		if err := json.Unmarshal([]byte(e.Document.String()), &merged); err != nil {
			t.Fatal(err)
		}
		if string(merged[f.name]) != string(raw[f.name]) {
			t.Errorf("a document of %s alone merges to %s: %s, want %s", f.name, f.name, merged[f.name], raw[f.name])
		}
	}
}
