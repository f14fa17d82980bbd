package resolver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/svc-pf/svc-pf/internal/promtest"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// The DoH3 tests use quic-go's own HTTP/3 client (http3.Transport), a
// client written outside this project. Debian's curl (7.88) is built
// without HTTP/3, so there is no curl interop test.

func withDoH3(c *resolver.Config) {
	c.Encrypted.DoH3 = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}
}

// h3Client is an HTTP/3 client with server name sni; closed with the test.
func (e *encEnv) h3Client(t *testing.T, sni string) *http.Client {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.pool, ServerName: sni}}
	t.Cleanup(func() { _ = tr.Close() })
	return &http.Client{Transport: tr, Timeout: bound}
}

func (e *encEnv) doh3URL(path string) string { return "https://" + e.r.DoH3Addrs()[0].String() + path }

func dohPost(t *testing.T, url string, m *dns.Msg) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(mustPack(t, m)))
	req.Header.Set("Content-Type", "application/dns-message")
	return req
}

// TestDoH3GetAndPost: GET with dns= and POST of application/dns-message
// over HTTP/3 are answered through the one entry, padded; the HTTP/2 and
// HTTP/1.1 DoH answers advertise the HTTP/3 endpoint in Alt-Svc.
func TestDoH3GetAndPost(t *testing.T) {
	e := newEncEnv(t, withDoH3)
	c := e.h3Client(t, "dns.example.test")
	m := query("get.test", dns.TypeA, 1232, false)
	m.Id = 0
	req, _ := http.NewRequest(http.MethodGet,
		e.doh3URL("/dns-query?dns="+base64.RawURLEncoding.EncodeToString(mustPack(t, m))), nil)
	e.checkDoH(t, c, req, 3, "get.test.")
	e.checkDoH(t, c, dohPost(t, e.doh3URL("/dns-query"), query("post.test", dns.TypeAAAA, 1232, false)), 3, "post.test.")

	want := fmt.Sprintf(`h3=":%d"; ma=86400`, e.r.DoH3Addrs()[0].Port())
	for _, h1 := range []bool{false, true} {
		for _, path := range []string{"/dns-query", "/nowhere"} { // answers and errors
			resp, err := e.httpClient(h1).Do(dohPost(t, e.dohURL(path), query("alt.test", dns.TypeA, 1232, false)))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got := resp.Header.Get("Alt-Svc"); got != want {
				t.Fatalf("HTTP/%d %s %s: Alt-Svc %q, want %q", resp.ProtoMajor, path, resp.Status, got, want)
			}
		}
	}
	// Without dns.doh3 there is none.
	plain := newEncEnv(t, nil)
	resp, err := plain.httpClient(false).Do(dohPost(t, plain.dohURL("/dns-query"), query("alt.test", dns.TypeA, 1232, false)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Alt-Svc"); got != "" {
		t.Fatalf("Alt-Svc %q without dns.doh3", got)
	}
}

// TestDoH3BadInput: the DoH paths' 4xx answers, with {"error": …}, over
// HTTP/3 too; a malformed DNS message is answered FORMERR.
func TestDoH3BadInput(t *testing.T) {
	e := newEncEnv(t, withDoH3)
	c := e.h3Client(t, "dns.example.test")
	q := mustPack(t, query("x.test", dns.TypeA, 1232, false))
	cases := dohBadRequests(t, q)
	for _, tc := range cases {
		var body io.Reader
		if tc.body != nil {
			body = bytes.NewReader(tc.body)
		}
		req, _ := http.NewRequest(tc.method, e.doh3URL(tc.path), body)
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		r, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		var eb struct{ Error string }
		if r.StatusCode != tc.want || r.ProtoMajor != 3 || json.Unmarshal(b, &eb) != nil || eb.Error == "" || len(b) > 200 {
			t.Errorf("%s: HTTP/%d %s %q, want %d with a short {\"error\": …}", tc.name, r.ProtoMajor, r.Status, b, tc.want)
		}
		if tc.want == 405 && r.Header.Get("Allow") != "GET, POST" {
			t.Errorf("%s: Allow %q", tc.name, r.Header.Get("Allow"))
		}
	}
	big, _ := http.NewRequest(http.MethodGet, e.doh3URL("/dns-query?dns="+base64.RawURLEncoding.EncodeToString(q)), nil)
	big.Header.Set("X-Filler", strings.Repeat("a", 20<<10))
	if r, err := c.Do(big); err != nil || r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("request headers over 16 KiB: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	checkDoHFormErr(t, c, e.doh3URL("/dns-query"), q)
}

// TestDoH3ClientIDs: the client id of the path, else of the TLS server
// name, reaches the observer, the query counted as DoH; a name blocked by
// the policy is answered with its EDE, naming the identity used.
func TestDoH3ClientIDs(t *testing.T) {
	rec := &recorder{}
	e := newEncEnv(t, func(c *resolver.Config) { withDoH3(c); c.Observer = rec })
	plain := e.h3Client(t, "dns.example.test")
	sni := e.h3Client(t, "kid9.dns.example.test")
	for i, tc := range []struct {
		c          *http.Client
		path, want string
	}{
		{plain, "/dns-query/Kid1", "kid1"},
		{plain, "/dns-query", ""},
		{sni, "/dns-query", "kid9"},
		{sni, "/dns-query/kid1", "kid1"},
	} {
		e.checkDoH(t, tc.c, dohPost(t, e.doh3URL(tc.path), query("id1.test", dns.TypeA, 1232, false)), 3, "id1.test.")
		if ev := rec.next(t, i); ev.ClientID != tc.want || ev.Transport.String() != "doh" {
			t.Fatalf("%s with server name %d: client id %q over %s, want %q", tc.path, i, ev.ClientID, ev.Transport, tc.want)
		}
	}
	resp, err := plain.Do(dohPost(t, e.doh3URL("/dns-query"), query("global.test", dns.TypeA, 1232, false)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := mustUnpack(t, b)
	if ede, _ := edeOf(r); resp.StatusCode != 200 || len(b)%468 != 0 || ede == nil || !strings.HasSuffix(ede.ExtraText, "; identity: source address") {
		t.Fatalf("blocked name: %s, %d bytes, EDE %v: %v", resp.Status, len(b), ede, r)
	}
}

// TestDoH3Concurrent: many requests at once, on one connection and on
// several, each get their own answer.
func TestDoH3Concurrent(t *testing.T) {
	e := newEncEnv(t, withDoH3)
	clients := []*http.Client{e.h3Client(t, "dns.example.test"), e.h3Client(t, "dns.example.test"), e.h3Client(t, "dns.example.test")}
	var wg sync.WaitGroup
	errs := make(chan error, 90)
	for i := range 90 {
		wg.Go(func() {
			name := "c" + strconv.Itoa(i) + ".test"
			resp, err := clients[i%3].Do(dohPost(t, e.doh3URL("/dns-query"), query(name, dns.TypeA, 1232, false)))
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := new(dns.Msg)
			if resp.StatusCode != 200 || m.Unpack(b) != nil || m.Question[0].Name != name+"." || len(m.Answer) == 0 {
				errs <- fmt.Errorf("%s: %s %v", name, resp.Status, m)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDoH3Shutdown: a request under way when the resolver stops is still
// answered (within the grace); Run returns; the endpoint is gone after.
func TestDoH3Shutdown(t *testing.T) {
	e := newEncEnv(t, withDoH3)
	c := e.h3Client(t, "dns.example.test")
	e.checkDoH(t, c, dohPost(t, e.doh3URL("/dns-query"), query("warm.test", dns.TypeA, 1232, false)), 3, "warm.test.")
	type result struct {
		status int
		m      *dns.Msg
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := c.Do(dohPost(t, e.doh3URL("/dns-query"), query("a.hold.test", dns.TypeA, 1232, false)))
		if err != nil {
			done <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := new(dns.Msg)
		done <- result{resp.StatusCode, m, m.Unpack(b)}
	}()
	eventually(t, "query held upstream", func() bool { return e.up.held.Load() == 1 })
	e.cancel()
	// The stop has begun (its grace, a second, runs): the answer is
	// released soon after, so that it is written within the grace even
	// on a loaded machine.
	time.Sleep(20 * time.Millisecond)
	e.up.release()
	select {
	case r := <-done:
		if r.err != nil || r.status != 200 || len(r.m.Answer) == 0 {
			t.Fatalf("request under way at shutdown: %d %v %v", r.status, r.err, r.m)
		}
	case <-time.After(bound):
		t.Fatal("request under way at shutdown: no answer")
	}
	select {
	case <-e.runDone:
	case <-time.After(bound):
		t.Fatalf("Run did not return within %v of its context's end", bound)
	}
	c2 := e.h3Client(t, "dns.example.test")
	c2.Timeout = time.Second
	if resp, err := c2.Do(dohPost(t, e.doh3URL("/dns-query"), query("late.test", dns.TypeA, 1232, false))); err == nil {
		resp.Body.Close()
		t.Fatalf("answered after shutdown: %s", resp.Status)
	}
}

// TestDDRDoH3: a dns.doh3 listener on another port than DoH's gets an
// SVCB record of its own (alpn h3); on the DoH listener's address and
// port, "h3" joins that record's ALPN.
func TestDDRDoH3(t *testing.T) {
	e := newEncEnv(t, withDoH3)
	m := new(dns.Msg)
	m.SetQuestion("_dns.resolver.arpa.", dns.TypeSVCB)
	r := e.mustAsk("udp", "", m)
	h3 := e.r.DoH3Addrs()[0].Port()
	want := 3 // DoT, DoH, DoH3
	if e.r.DoHAddrs()[0].Port() == h3 {
		want = 2 // the kernel chose one port for both: merged, as below
	}
	if len(r.Answer) != want {
		t.Fatalf("DDR: %v", r)
	}
	got := svcbParams(t, r.Answer[want-1])
	if want == 2 && got["alpn"] == "h3,h2,http/1.1" {
		got["alpn"] = "h3"
	}
	if got["alpn"] != "h3" || got["port"] != strconv.Itoa(int(h3)) || got["dohpath"] != "/dns-query{?dns}" || got["ipv4hint"] != "127.0.0.1" {
		t.Fatalf("DoH3 record: %v", got)
	}

	port := freeTCPUDPPort(t)
	same := newEncEnv(t, func(c *resolver.Config) {
		c.Encrypted.DoT = nil
		c.Encrypted.DoH = []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}
		c.Encrypted.DoH3 = c.Encrypted.DoH
	})
	r = same.mustAsk("udp", "", m)
	if len(r.Answer) != 1 {
		t.Fatalf("DDR, DoH3 on DoH's port: %v", r)
	}
	if got := svcbParams(t, r.Answer[0]); got["alpn"] != "h3,h2,http/1.1" || got["port"] != strconv.Itoa(int(port)) {
		t.Fatalf("DoH record with DoH3 on its port: %v", got)
	}
	// Both protocols answer on that port.
	same.checkDoH(t, same.h3Client(t, "dns.example.test"), dohPost(t, "https://"+same.doh+"/dns-query", query("p.test", dns.TypeA, 1232, false)), 3, "p.test.")
	same.checkDoH(t, same.httpClient(false), dohPost(t, same.dohURL("/dns-query"), query("p.test", dns.TypeA, 1232, false)), 2, "p.test.")
}

func svcbParams(t *testing.T, rr dns.RR) map[string]string {
	t.Helper()
	s, ok := rr.(*dns.SVCB)
	if !ok || s.Target != "dns.example.test." {
		t.Fatalf("record: %v", rr)
	}
	got := map[string]string{}
	for _, kv := range s.Value {
		got[kv.Key().String()] = kv.String()
	}
	return got
}

// freeTCPUDPPort is a port of 127.0.0.1 free for TCP and UDP when asked.
func freeTCPUDPPort(t *testing.T) uint16 {
	t.Helper()
	for range 20 {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		_ = u.Close()
		if err == nil {
			_ = l.Close()
			return uint16(p)
		}
	}
	t.Fatal("no port free for TCP and UDP")
	return 0
}

// h3From is an HTTP/3 client whose connections come from src (a local
// address).
func (e *encEnv) h3From(t *testing.T, src string) *http.Client {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)})
	if err != nil {
		t.Fatal(err)
	}
	qt := &quic.Transport{Conn: udp}
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.pool, ServerName: "dns.example.test"},
		Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			a, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			return qt.Dial(ctx, a, tc, qc)
		}}
	t.Cleanup(func() { _ = tr.Close(); _ = qt.Close(); _ = udp.Close() })
	return &http.Client{Transport: tr, Timeout: bound}
}

// TestDoH3Handshakes: the QUIC side is DoQ's, counted apart: a client
// offering no h3 (here doq) fails its handshake, counted in
// svcpf_resolver_tls_handshake_failures_total{listener="doh3"} (not
// doq's); one address holds at most max_connections_per_client
// connections (one more is closed once accepted) while another address
// is served.
func TestDoH3Handshakes(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEncEnv(t, func(c *resolver.Config) {
		withDoH3(c)
		withDoQ(c)
		c.Registerer = reg
		c.Encrypted.MaxConnectionsPerClient = 2
	})
	failures := func(l string) float64 {
		return promtest.Value(t, reg, "svcpf_resolver_tls_handshake_failures_total", "listener", l)
	}
	addr := net.UDPAddrFromAddrPort(e.r.DoH3Addrs()[0])
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if c, err := quic.DialAddr(ctx, addr.String(), &tls.Config{RootCAs: e.ca.pool, ServerName: "dns.example.test", NextProtos: []string{"doq"}}, nil); err == nil {
		_ = c.CloseWithError(0, "")
		t.Fatal("a doq client completed its handshake on dns.doh3")
	}
	eventually(t, "the failed handshake counted under doh3", func() bool { return failures("doh3") == 1 })
	if n := failures("doq"); n != 0 {
		t.Fatalf("doq failures %v", n)
	}

	tc := &tls.Config{RootCAs: e.ca.pool, ServerName: "dns.example.test", NextProtos: []string{"h3"}}
	var held []*quic.Conn
	for range 2 {
		c, err := quic.DialAddr(ctx, addr.String(), tc, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseWithError(0, "")
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // both accepted
	over, err := quic.DialAddr(ctx, addr.String(), tc, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-over.Context().Done():
	case <-time.After(bound):
		t.Fatal("a connection over the per-client bound was not closed")
	}
	for i, c := range held {
		if c.Context().Err() != nil {
			t.Fatalf("held connection %d closed", i)
		}
	}
	e.checkDoH(t, e.h3From(t, "127.0.0.2"), dohPost(t, e.doh3URL("/dns-query"), query("other.test", dns.TypeA, 1232, false)), 3, "other.test.")
}

// TestDoH3PolicyDropAndAllowFrom: a query the policy drops gets no answer
// (its stream is reset) and the connection serves the next; a client
// outside allow_from has its connection closed, counted in
// unauthorized-udp.
func TestDoH3PolicyDropAndAllowFrom(t *testing.T) {
	e := newEncEnv(t, func(c *resolver.Config) {
		withDoH3(c)
		c.AllowFrom = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/29")} // 127.0.0.8 and up refused
	})
	c := e.h3From(t, "127.0.0.5") // dave: blocked.test dropped
	if resp, err := c.Do(dohPost(t, e.doh3URL("/dns-query"), query("blocked.test", dns.TypeA, 1232, false))); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("a dropped query answered %s %q", resp.Status, b)
	}
	e.checkDoH(t, c, dohPost(t, e.doh3URL("/dns-query"), query("fine.test", dns.TypeA, 1232, false)), 3, "fine.test.")

	before := e.stat("unauthorized-udp")
	if resp, err := e.h3From(t, "127.0.0.9").Do(dohPost(t, e.doh3URL("/dns-query"), query("fine.test", dns.TypeA, 1232, false))); err == nil {
		resp.Body.Close()
		t.Fatalf("a client outside allow_from answered %s", resp.Status)
	}
	// Counted per connection refused: the client may dial again after
	// the first is closed, so at least one more.
	if got := e.stat("unauthorized-udp"); got <= before {
		t.Fatalf("unauthorized-udp %d → %d, want more", before, got)
	}
}
