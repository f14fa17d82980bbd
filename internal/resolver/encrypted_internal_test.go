package resolver

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestValidClientID(t *testing.T) {
	for in, want := range map[string]string{"kid1": "kid1", "KID-1": "kid-1", strings.Repeat("a", 63): strings.Repeat("a", 63)} {
		if got, ok := validClientID(in); !ok || got != want {
			t.Errorf("validClientID(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", strings.Repeat("a", 64), "a_b", "a.b", "a/b", "ü"} {
		if got, ok := validClientID(in); ok {
			t.Errorf("validClientID(%q) = %q, accepted", in, got)
		}
	}
}

func TestClientIDFromSNI(t *testing.T) {
	const suffix = "dns.example.net"
	for _, tc := range []struct{ sni, suffix, want string }{
		{"kid1.dns.example.net", suffix, "kid1"},
		{"KID1.DNS.Example.NET.", suffix, "kid1"},
		{"dns.example.net", suffix, ""},
		{"a.kid1.dns.example.net", suffix, ""},
		{"kid1.other.net", suffix, ""},
		{"kid_1.dns.example.net", suffix, ""},
		{"kid1.dns.example.net", "", ""},
	} {
		if got := clientIDFromSNI(tc.sni, tc.suffix); got != tc.want {
			t.Errorf("clientIDFromSNI(%q, %q) = %q, want %q", tc.sni, tc.suffix, got, tc.want)
		}
	}
}

// TestPadReply: an EDNS reply grows to a multiple of 468 with one
// padding option (an existing one replaced), still the same message; a
// reply without OPT is unchanged.
func TestPadReply(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("example.test.", dns.TypeA)
	m.Response = true
	m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: "example.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
		A: []byte{192, 0, 2, 1}})
	plain, _ := m.Pack()
	if got := padReply(plain); !bytes.Equal(got, plain) {
		t.Fatal("a reply without OPT changed")
	}
	m.SetEdns0(1232, false)
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_PADDING{Padding: make([]byte, 5)})
	wire, _ := m.Pack()
	got := padReply(wire)
	if len(got)%padBlock != 0 {
		t.Fatalf("padded to %d bytes", len(got))
	}
	var back dns.Msg
	if err := back.Unpack(got); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range back.IsEdns0().Option {
		if o.Option() == dns.EDNS0PADDING {
			n++
		}
	}
	if n != 1 || len(back.Answer) != 1 || back.Answer[0].String() != m.Answer[0].String() {
		t.Fatalf("padded reply %v", &back)
	}
}

// FuzzDoHRequest: whatever the method, path, query string, content type
// and body, parseDoHRequest returns a query of 1–65535 bytes, or a
// *dohError with a 4xx status and a short text; never a panic.
func FuzzDoHRequest(f *testing.F) {
	q := new(dns.Msg)
	q.SetQuestion("example.test.", dns.TypeA)
	wire, _ := q.Pack()
	b64 := base64.RawURLEncoding.EncodeToString(wire)
	f.Add("GET", "/dns-query", "dns="+b64, "", []byte(nil))
	f.Add("GET", "/dns-query/kid1", "dns="+b64+"==", "", []byte(nil))
	f.Add("GET", "/dns-query", "dns=!!!", "", []byte(nil))
	f.Add("GET", "/dns-query", "dns=a&dns=b", "", []byte(nil))
	f.Add("POST", "/dns-query", "", "application/dns-message", wire)
	f.Add("POST", "/dns-query/KID", "", "application/dns-message; charset=x", wire)
	f.Add("POST", "/dns-query", "", "text/plain", wire)
	f.Add("PUT", "/dns-query", "", "application/dns-message", wire)
	f.Add("POST", "/dns-query/a/b", "", "application/dns-message", wire)
	f.Add("GET", "/other", "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, method, path, rawQuery, ctype string, body []byte) {
		req := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: rawQuery}, Header: http.Header{},
			Body: http.NoBody, ContentLength: int64(len(body))}
		if len(body) > 0 {
			req.Body = nopCloser{bytes.NewReader(body)}
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		// dnsParam reads the dns parameter as url.ParseQuery does
		v, n := dnsParam(rawQuery)
		if all, _ := url.ParseQuery(rawQuery); len(all["dns"]) != n || n > 0 && all["dns"][n-1] != v {
			t.Fatalf("dnsParam(%q) = %q, %d; url.ParseQuery: %q", rawQuery, v, n, all["dns"])
		}
		pkt, id, err := parseDoHRequest(req)
		if err != nil {
			var de *dohError
			if !errors.As(err, &de) || de.status < 400 || de.status > 499 || de.msg == "" || len(de.msg) > 100 {
				t.Fatalf("error %v (%T)", err, err)
			}
			return
		}
		if len(pkt) == 0 || len(pkt) > 65535 {
			t.Fatalf("query of %d bytes", len(pkt))
		}
		if id != "" {
			if v, ok := validClientID(id); !ok || v != id {
				t.Fatalf("client id %q", id)
			}
		}
	})
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
