package simulator

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestParseSimulate(t *testing.T) {
	ok := []struct {
		query string
		check func(*Request) bool
	}{
		{"domain=Example.COM.", func(r *Request) bool { return r.Domain == "example.com" }},
		{"domain=b%C3%BCcher.example", func(r *Request) bool { return r.Domain == "xn--bcher-kva.example" }},
		{"domain=a.example&path=x/y", func(r *Request) bool { return r.Path == "/x/y" }},
		{"domain=a.example&ip=10.0.0.1", func(r *Request) bool { return r.IP.String() == "10.0.0.1" }},
		{"domain=a.example&ip=::ffff:10.0.0.1", func(r *Request) bool { return r.IP.String() == "10.0.0.1" }},
		{"domain=a.example&deviceid=6d61633a30613162", func(r *Request) bool { return r.DeviceID == "mac:0a1b" }},
		{"domain=a.example&profile=3", func(r *Request) bool { return r.HasProfile && r.Profile == 3 }},
		{"domain=a.example&settings=%7B%22paused%22%3Atrue%7D", func(r *Request) bool { return r.Settings != nil && *r.Settings.Paused }},
		{"domain=a.example&verbose=1&vhost=proxy1", func(r *Request) bool { return r.Verbose && r.VHost == "proxy1" }},
		{"domain=a.example&verbose=true", func(r *Request) bool { return r.Verbose }},
		{"domain=a.example&verbose=0", func(r *Request) bool { return !r.Verbose }},
		{"domain=a.example&verbose=false", func(r *Request) bool { return !r.Verbose }},
		{"domain=a.example&rules_ip=192.0.2.1", func(r *Request) bool { return r.RulesIP.String() == "192.0.2.1" }},
		{"domain=a.example&unknown=1", func(r *Request) bool { return true }}, // a proxy's own parameters pass
	}
	for _, tt := range ok {
		q, _ := url.ParseQuery(tt.query)
		r, err := ParseSimulate(q)
		if err != nil || !tt.check(r) {
			t.Errorf("%s: %+v, %v", tt.query, r, err)
		}
	}
	bad := []struct{ query, want string }{
		{"", "domain is required"},
		{"path=/x", "domain is required"},
		{"domain=10.0.0.1", "IP address"},
		{"domain=a..b", "domain"},
		{"domain=a.example&domain=b.example", "once"},
		{"domain=a.example&ip=10.0.0.300", "ip"},
		{"domain=a.example&ip=fe80::1%25eth0", "ip"},
		{"domain=a.example&rules_ip=x", "rules_ip"},
		{"domain=a.example&deviceid=zz", "hex"},
		{"domain=a.example&deviceid=00", "deviceid"},
		{"domain=a.example&profile=-1", "profile"},
		{"domain=a.example&profile=x", "profile"},
		{"domain=a.example&settings=%7B", "settings"},
		{"domain=a.example&settings=%7B%22blocklist%22%3A%5B%22a..b%22%5D%7D", "settings.blocklist"},
		{"domain=a.example&settings=%7B%22nope%22%3A1%7D", "settings"},
		{"domain=a.example&verbose=2", `verbose must be 1, true, 0 or false, not "2"`},
		{"domain=a.example&verbose=yes", `verbose must be 1, true, 0 or false, not "yes"`},
		{"domain=a.example&verbose=TRUE", "verbose must be"},
		{"domain=a.example&path=%2Fa%00b", "control"},
		{"domain=a.example&username=%ff", "UTF-8"},
		{"domain=a.example&vhost=" + strings.Repeat("v", 300), "vhost"},
	}
	for _, tt := range bad {
		q, _ := url.ParseQuery(tt.query)
		_, err := ParseSimulate(q)
		var br *BadRequest
		if !errors.As(err, &br) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want a BadRequest naming %q", tt.query, err, tt.want)
		}
	}
}

// TestTableRoundTrip: what a script receives is what a built-in reads back.
func TestTableRoundTrip(t *testing.T) {
	q, _ := url.ParseQuery("domain=a.example&path=/p&ip=10.0.0.1&username=alice&deviceid=6d61633a30613162&profile=2" +
		"&settings=%7B%22paused%22%3Atrue%7D&rules_ip=192.0.2.1&verbose=1&vhost=v")
	r, err := ParseSimulate(q)
	if err != nil {
		t.Fatal(err)
	}
	tbl := r.Table()
	tbl["profile"] = float64(2) // as Lua hands numbers back
	back, err := FromTable(tbl)
	if err != nil {
		t.Fatal(err)
	}
	if back.Domain != r.Domain || back.Path != r.Path || back.IP != r.IP || back.Username != r.Username ||
		back.DeviceID != r.DeviceID || back.Profile != r.Profile || !back.HasProfile || back.Settings == nil ||
		back.RulesIP != r.RulesIP || !back.Verbose || back.VHost != r.VHost {
		t.Fatalf("round trip: %+v, want %+v", back, r)
	}
	if _, err := FromTable(map[string]any{"domain": "a.example", "ip": map[string]any{}}); err == nil {
		t.Fatal("a table value accepted as ip")
	}
}

// FuzzParseSimulate: any query string, read as the handler reads a GET's,
// gives a request or a BadRequest, never a panic; no pair is dropped
// silently (a malformed one is a BadRequest); verbose is on exactly for 1
// and true; an accepted request's table reads back.
func FuzzParseSimulate(f *testing.F) {
	for _, s := range []string{"domain=a.example", "domain=x&ip=1.2.3.4&deviceid=00ff&profile=1&settings={}",
		"domain=%C3%A9.example&path=//&verbose=1", "settings=%7B%22schedules%22%3A%5B%5D%7D&domain=a",
		"domain=a.example&ip=%ZZ", "domain=a.example;ip=10.0.0.1", "domain=a.example&verbose=true&&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// As the handler reads a GET: query, then ParseSimulate.
		q, err := query(&http.Request{URL: &url.URL{RawQuery: raw}})
		var br *BadRequest
		if err != nil {
			if !errors.As(err, &br) {
				t.Fatalf("%q: %v is not a BadRequest", raw, err)
			}
			return
		}
		// Nothing is dropped: every non-empty pair is a value.
		pairs, values := 0, 0
		for _, p := range strings.Split(raw, "&") {
			if p != "" {
				pairs++
			}
		}
		for _, vs := range q {
			values += len(vs)
		}
		if pairs != values {
			t.Fatalf("%q: %d pairs read as %d values", raw, pairs, values)
		}
		r, err := ParseSimulate(q)
		if err != nil {
			if !errors.As(err, &br) {
				t.Fatalf("%q: %v is not a BadRequest", raw, err)
			}
			return
		}
		if v := q.Get("verbose"); r.Verbose != (v == "1" || v == "true") {
			t.Fatalf("%q: verbose %q read as %v", raw, v, r.Verbose)
		}
		if _, err := FromTable(r.Table()); err != nil {
			t.Fatalf("%q: accepted, but its table is refused: %v", raw, err)
		}
	})
}

// FuzzNATSParams: any NATS payload gives parameters or a BadRequest, and
// the parameters parse or are refused with a BadRequest: never a panic.
func FuzzNATSParams(f *testing.F) {
	for _, s := range []string{`{"domain":"a.example","ip":"10.0.0.1"}`, `{"settings":{"paused":true},"domain":"x"}`,
		`{"verbose":true,"profile":2,"domain":"y"}`, `[]`, ``, `{"domain":[1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		params, err := natsParams(data)
		var br *BadRequest
		if err != nil {
			if !errors.As(err, &br) {
				t.Fatalf("%q: %v is not a BadRequest", data, err)
			}
			return
		}
		if _, err := ParseSimulate(params); err != nil && !errors.As(err, &br) {
			t.Fatalf("%q: %v is not a BadRequest", data, err)
		}
	})
}
