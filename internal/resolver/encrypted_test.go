package resolver_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// testCA is a throwaway certificate authority; leaf certificates it signs
// name dns.example.test and *.dns.example.test.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	pool    *x509.CertPool
	pemFile string
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "svc-pf test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pool: x509.NewCertPool(), pemFile: filepath.Join(t.TempDir(), "ca.pem")}
	ca.pool.AddCert(cert)
	writeFile(t, ca.pemFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return ca
}

// leaf writes a leaf certificate with serial and its key to certFile and
// keyFile.
func (ca *testCA) leaf(t testing.TB, serial int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "dns.example.test"},
		DNSNames:    []string{"dns.example.test", "*.dns.example.test", "a.b.dns.example.test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	writeFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// encEnv is a resolver with one DoT and one DoH listener on 127.0.0.1.
type encEnv struct {
	*testEnv
	ca                *testCA
	certFile, keyFile string
	dot, doh          string
	logs              *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newEncEnv(t testing.TB, mod func(*resolver.Config)) *encEnv {
	t.Helper()
	dir := t.TempDir()
	e := &encEnv{ca: newTestCA(t), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"),
		logs: &lockedBuffer{}}
	e.ca.leaf(t, 100, e.certFile, e.keyFile)
	e.testEnv = newEnv(t, func(c *resolver.Config) {
		c.Encrypted = resolver.EncryptedConfig{
			DoT:      []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")},
			DoH:      []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")},
			CertFile: e.certFile, KeyFile: e.keyFile, ClientIDSuffix: "dns.example.test",
		}
		c.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		if mod != nil {
			mod(c)
		}
	})
	if a := e.r.DoTAddrs(); len(a) > 0 {
		e.dot = a[0].String()
	}
	if a := e.r.DoHAddrs(); len(a) > 0 {
		e.doh = a[0].String()
	}
	return e
}

func (e *encEnv) tlsConfig(sni string) *tls.Config {
	return &tls.Config{RootCAs: e.ca.pool, ServerName: sni, MinVersion: tls.VersionTLS12}
}

// dotAsk sends m over a new DoT connection with server name sni.
func (e *encEnv) dotAsk(t *testing.T, sni string, m *dns.Msg) (*dns.Msg, []byte, *tls.ConnectionState) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", e.dot, e.tlsConfig(sni))
	if err != nil {
		t.Fatalf("DoT dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(bound))
	writeTCP(t, c, mustPack(t, m))
	b, closed := readTCP(t, c)
	if closed {
		t.Fatal("DoT connection closed without an answer")
	}
	st := c.ConnectionState()
	return mustUnpack(t, b), b, &st
}

// httpClient is a DoH client: HTTP/2 unless h1.
func (e *encEnv) httpClient(h1 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: e.tlsConfig("dns.example.test"), ForceAttemptHTTP2: !h1}
	if h1 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: bound}
}

func (e *encEnv) dohURL(path string) string { return "https://" + e.doh + path }

// TestDoTAnswers: a query over DoT is answered through the one entry
// (counted a TCP-stream question), its EDNS reply padded to a multiple
// of 468 bytes; a reply to a query without EDNS carries no OPT and is
// not padded.
func TestDoTAnswers(t *testing.T) {
	e := newEncEnv(t, nil)
	before := e.stats("tcp-questions", "questions")
	r, wire, st := e.dotAsk(t, "dns.example.test", query("a.test", dns.TypeA, 1232, false))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("answer %v", r)
	}
	if st.NegotiatedProtocol != "" && st.NegotiatedProtocol != "dot" {
		t.Fatalf("ALPN %q", st.NegotiatedProtocol)
	}
	if len(wire)%468 != 0 {
		t.Fatalf("EDNS reply of %d bytes: not padded to a multiple of 468", len(wire))
	}
	opt := r.IsEdns0()
	if opt == nil || !hasPadding(opt) {
		t.Fatalf("no padding option in %v", r)
	}
	m := new(dns.Msg)
	m.SetQuestion("b.test.", dns.TypeA)
	r2, _, _ := e.dotAsk(t, "", m)
	if r2.Rcode != dns.RcodeSuccess || r2.IsEdns0() != nil {
		t.Fatalf("reply to a query without EDNS: %v", r2)
	}
	e.wantMoved("dot", before, map[string]uint64{"tcp-questions": 2, "questions": 2})
}

func hasPadding(opt *dns.OPT) bool {
	for _, o := range opt.Option {
		if o.Option() == dns.EDNS0PADDING {
			return true
		}
	}
	return false
}

// TestDoHGetAndPost: GET ?dns= and POST application/dns-message are
// answered over HTTP/2 and HTTP/1.1, the replies padded, the GET as a
// browser sends it (Accept: application/dns-message, no base64 padding).
func TestDoHGetAndPost(t *testing.T) {
	e := newEncEnv(t, nil)
	for _, h1 := range []bool{false, true} {
		c := e.httpClient(h1)
		wantProto := 2
		if h1 {
			wantProto = 1
		}
		m := query("get.test", dns.TypeA, 1232, false)
		m.Id = 0
		req, _ := http.NewRequest(http.MethodGet,
			e.dohURL("/dns-query?dns="+base64.RawURLEncoding.EncodeToString(mustPack(t, m))), nil)
		req.Header.Set("Accept", "application/dns-message")
		e.checkDoH(t, c, req, wantProto, "get.test.")

		m = query("post.test", dns.TypeAAAA, 1232, false)
		req, _ = http.NewRequest(http.MethodPost, e.dohURL("/dns-query"), bytes.NewReader(mustPack(t, m)))
		req.Header.Set("Content-Type", "application/dns-message")
		e.checkDoH(t, c, req, wantProto, "post.test.")
	}
}

func (e *encEnv) checkDoH(t *testing.T, c *http.Client, req *http.Request, proto int, name string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/dns-message" {
		t.Fatalf("%s %s: %s %q", req.Method, req.URL, resp.Status, body)
	}
	if resp.ProtoMajor != proto {
		t.Fatalf("HTTP/%d, want HTTP/%d", resp.ProtoMajor, proto)
	}
	if len(body)%468 != 0 {
		t.Fatalf("reply of %d bytes not padded", len(body))
	}
	r := mustUnpack(t, body)
	if r.Rcode != dns.RcodeSuccess || r.Question[0].Name != name || len(r.Answer) == 0 {
		t.Fatalf("answer %v", r)
	}
}

// TestDoHBadInput: every malformed request gets a 4xx with a short text,
// never a 500; a request that is not a query at all (a response) too.
func TestDoHBadInput(t *testing.T) {
	e := newEncEnv(t, nil)
	c := e.httpClient(false)
	q := mustPack(t, query("x.test", dns.TypeA, 1232, false))
	cases := dohBadRequests(t, q)
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, e.dohURL(tc.path), bytes.NewReader(tc.body))
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		r, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		var eb struct{ Error string }
		if r.StatusCode != tc.want || json.Unmarshal(body, &eb) != nil || eb.Error == "" || len(body) > 200 {
			t.Errorf("%s: %s %q, want %d with a short {\"error\": …}", tc.name, r.Status, body, tc.want)
		}
	}
	checkDoHFormErr(t, c, e.dohURL("/dns-query"), q)
}

// dohBadRequest is a malformed DoH request and the status it gets.
type dohBadRequest struct {
	name, method, path, ctype string
	body                      []byte
	want                      int
}

// dohBadRequests are the malformed DoH requests every DoH transport
// refuses with a 4xx; q is a well-formed query.
func dohBadRequests(t *testing.T, q []byte) []dohBadRequest {
	resp := new(dns.Msg)
	resp.SetQuestion("x.test.", dns.TypeA)
	resp.Response = true
	return []dohBadRequest{
		{"bad base64", "GET", "/dns-query?dns=%21%21%21", "", nil, 400},
		{"no dns parameter", "GET", "/dns-query", "", nil, 400},
		{"wrong content type", "POST", "/dns-query", "text/plain", q, 415},
		{"no content type", "POST", "/dns-query", "", q, 415},
		{"oversized body", "POST", "/dns-query", "application/dns-message", make([]byte, 70000), 413},
		{"empty body", "POST", "/dns-query", "application/dns-message", nil, 400},
		{"wrong method", "PUT", "/dns-query", "application/dns-message", q, 405},
		{"wrong path", "GET", "/resolve?dns=" + base64.RawURLEncoding.EncodeToString(q), "", nil, 404},
		{"bad client id", "POST", "/dns-query/Not_Valid", "application/dns-message", q, 400},
		{"long client id", "POST", "/dns-query/" + strings.Repeat("a", 64), "application/dns-message", q, 400},
		{"a response", "POST", "/dns-query", "application/dns-message", mustPack(t, resp), 400},
	}
}

// checkDoHFormErr: a malformed DNS message (q's header, claiming a
// question it lacks) POSTed to url is a query the entry answers FORMERR,
// as over UDP: a 200 with the rcode.
func checkDoHFormErr(t *testing.T, c *http.Client, url string, q []byte) {
	t.Helper()
	bad := append([]byte(nil), q[:12]...)
	bad[5] = 1 // one question, not there
	req, _ := http.NewRequest("POST", url, bytes.NewReader(bad))
	req.Header.Set("Content-Type", "application/dns-message")
	r, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || mustUnpack(t, body).Rcode != dns.RcodeFormatError {
		t.Fatalf("malformed query: %s %q", r.Status, body)
	}
}

// TestEncryptedClientIDs: the client id of the DoH path and of the DoT
// server name reaches the observer; a server name not below the suffix,
// or with an invalid label, carries none.
func TestEncryptedClientIDs(t *testing.T) {
	rec := &recorder{}
	e := newEncEnv(t, func(c *resolver.Config) { c.Observer = rec })
	c := e.httpClient(false)
	req, _ := http.NewRequest(http.MethodPost, e.dohURL("/dns-query/Kid1"),
		bytes.NewReader(mustPack(t, query("id1.test", dns.TypeA, 1232, false))))
	req.Header.Set("Content-Type", "application/dns-message")
	e.checkDoH(t, c, req, 2, "id1.test.")
	ev := rec.next(t, 0)
	if ev.ClientID != "kid1" || ev.Transport.String() != "doh" {
		t.Fatalf("DoH event: client id %q over %s", ev.ClientID, ev.Transport)
	}
	// The server name's id over DoH; the path's wins over it.
	hc := &http.Client{Timeout: bound, Transport: &http.Transport{TLSClientConfig: e.tlsConfig("kid9.dns.example.test"),
		ForceAttemptHTTP2: true}}
	for i, path := range []string{"/dns-query", "/dns-query/kid1"} {
		req, _ := http.NewRequest(http.MethodPost, e.dohURL(path),
			bytes.NewReader(mustPack(t, query("id1.test", dns.TypeA, 1232, false))))
		req.Header.Set("Content-Type", "application/dns-message")
		e.checkDoH(t, hc, req, 2, "id1.test.")
		want := []string{"kid9", "kid1"}[i]
		if ev := rec.next(t, 1+i); ev.ClientID != want {
			t.Fatalf("DoH on %s with server name kid9: client id %q, want %q", path, ev.ClientID, want)
		}
	}
	for i, tc := range []struct{ sni, want string }{
		{"kid2.dns.example.test", "kid2"},
		{"KID3.dns.example.test", "kid3"},
		{"dns.example.test", ""},
		{"a.b.dns.example.test", ""},
	} {
		e.dotAsk(t, tc.sni, query("id2.test", dns.TypeA, 1232, false))
		ev := rec.next(t, 3+i)
		if ev.ClientID != tc.want || ev.Transport.String() != "dot" {
			t.Fatalf("DoT with server name %q: client id %q over %s, want %q", tc.sni, ev.ClientID, ev.Transport, tc.want)
		}
	}
}

// TestEncryptedCertReload: a renewed pair is served from the next
// handshake a second later; a broken pair keeps the previous one serving
// and is logged.
func TestEncryptedCertReload(t *testing.T) {
	e := newEncEnv(t, nil)
	serial := func() int64 {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", e.dot, e.tlsConfig("dns.example.test"))
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(); s != 100 {
		t.Fatalf("serial %d, want 100", s)
	}
	e.ca.leaf(t, 200, e.certFile, e.keyFile)
	eventually(t, "the renewed certificate served", func() bool { return serial() == 200 })
	// (A handshake between the renewal's two writes may have logged a
	// failure already: count the new ones.)
	failures := strings.Count(e.logs.String(), "do not load")
	writeFile(t, e.certFile, []byte("not a certificate"))
	eventually(t, "the broken pair logged", func() bool {
		return serial() == 200 && strings.Count(e.logs.String(), "do not load") > failures
	})
	if s := serial(); s != 200 {
		t.Fatalf("serial %d after a broken renewal, want 200 still", s)
	}
}

// TestDoTConnectionsPerClient: a client address past
// max_connections_per_client has its next connection closed at once; one
// closed makes room again.
func TestDoTConnectionsPerClient(t *testing.T) {
	e := newEncEnv(t, func(c *resolver.Config) { c.Encrypted.MaxConnectionsPerClient = 2 })
	var open []*tls.Conn
	for range 2 {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", e.dot, e.tlsConfig("dns.example.test"))
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", e.dot, e.tlsConfig("dns.example.test"))
	if err == nil {
		c.Close()
		t.Fatal("a third connection from one address completed its handshake")
	}
	open[0].Close()
	eventually(t, "room for a new connection", func() bool {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", e.dot, e.tlsConfig("dns.example.test"))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	open[1].Close()
}

// TestEncryptedConfigErrors: a listener without a certificate, a pair
// that does not load and a bad suffix fail New, naming the key.
func TestEncryptedConfigErrors(t *testing.T) {
	dot := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}
	missing := filepath.Join(t.TempDir(), "none.pem")
	for _, tc := range []struct {
		c    resolver.EncryptedConfig
		want string
	}{
		{resolver.EncryptedConfig{DoT: dot}, "dns.tls.cert_file"},
		{resolver.EncryptedConfig{DoH: dot, CertFile: missing, KeyFile: missing}, "dns.tls.cert_file"},
		{resolver.EncryptedConfig{ClientIDSuffix: "bad_suffix!"}, "dns.tls.client_id_suffix"},
		{resolver.EncryptedConfig{IdleTimeout: -1}, "dns.tls.idle_timeout"},
		{resolver.EncryptedConfig{HandshakeTimeout: -1}, "dns.tls.handshake_timeout"},
	} {
		_, err := resolver.New(resolver.Config{Listen: dot, Forwarders: []netip.AddrPort{closedPort(t)}, Engine: testEngine(t, nil), Encrypted: tc.c})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %s", tc.c, err, tc.want)
		}
	}
}

// TestDoTIdleTimeout: a DoT connection idle for dns.tls.idle_timeout is
// closed by the server.
func TestDoTIdleTimeout(t *testing.T) {
	e := newEncEnv(t, func(c *resolver.Config) { c.Encrypted.IdleTimeout = 200 * time.Millisecond })
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", e.dot, e.tlsConfig("dns.example.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(bound))
	var b [1]byte
	if _, err := c.Read(b[:]); err == nil {
		t.Fatal("read data from an idle connection")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("not closed within %v: %v", bound, err)
	}
}

// TestDoHPolicyDrop: a query the policy drops gets no answer over DoH:
// the stream is reset, the client sees an error (never a 5xx or a DNS
// answer), and the server goes on answering.
func TestDoHPolicyDrop(t *testing.T) {
	e := newEncEnv(t, nil)
	tr := &http.Transport{TLSClientConfig: e.tlsConfig("dns.example.test"), ForceAttemptHTTP2: true,
		DialContext: (&net.Dialer{Timeout: bound,
			LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}).DialContext} // dave: blocked.test dropped
	c := &http.Client{Transport: tr, Timeout: bound}
	req, _ := http.NewRequest(http.MethodPost, e.dohURL("/dns-query"),
		bytes.NewReader(mustPack(t, query("blocked.test", dns.TypeA, 1232, false))))
	req.Header.Set("Content-Type", "application/dns-message")
	resp, err := c.Do(req)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("a dropped query answered %s %q", resp.Status, body)
	}
	req, _ = http.NewRequest(http.MethodPost, e.dohURL("/dns-query"),
		bytes.NewReader(mustPack(t, query("fine.test", dns.TypeA, 1232, false))))
	req.Header.Set("Content-Type", "application/dns-message")
	e.checkDoH(t, c, req, 2, "fine.test.")
}

// TestDoTPipelinedCoalesced: many queries pipelined on one DoT
// connection, answered concurrently, come back each whole and framed on
// its own, padded, whatever replies the server coalesced into one write
// (tcp.go, write).
func TestDoTPipelinedCoalesced(t *testing.T) {
	e := newEncEnv(t, func(c *resolver.Config) { c.Encrypted.MaxQueriesPerConnection = 100 })
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", e.dot, e.tlsConfig("dns.example.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * bound))
	const n = 300
	var msgs [][]byte
	for i := range n {
		m := query(fmt.Sprintf("c%d.test", i%40), dns.TypeA, 1232, false)
		m.Id = uint16(1000 + i)
		msgs = append(msgs, mustPack(t, m))
	}
	var all []byte
	for _, m := range msgs {
		all = append(append(all, byte(len(m)>>8), byte(len(m))), m...)
	}
	go func() { _, _ = c.Write(all) }() // a failed write shows as missing answers
	seen := map[uint16]bool{}
	for range n {
		b, closed := readTCP(t, c)
		if closed {
			t.Fatalf("closed after %d answers", len(seen))
		}
		if len(b)%468 != 0 {
			t.Fatalf("answer of %d bytes: not padded to 468", len(b))
		}
		r := mustUnpack(t, b)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Question[0].Name != fmt.Sprintf("c%d.test.", (r.Id-1000)%40) {
			t.Fatalf("answer %v", r)
		}
		seen[r.Id] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct answers, want %d", len(seen), n)
	}
}

// TestDoHHeldMissDoesNotHoldConnection: on one HTTP/2 connection, a
// query whose forwarder holds its answer, then queries answered from the
// record cache (whose slow path runs on the connection's reader): those
// are answered meanwhile, and the held one once released.
func TestDoHHeldMissDoesNotHoldConnection(t *testing.T) {
	e := newEncEnv(t, func(c *resolver.Config) { c.Upstream.Timeout = 4 * time.Second })
	tr := &http.Transport{TLSClientConfig: e.tlsConfig("dns.example.test"), ForceAttemptHTTP2: true, MaxConnsPerHost: 1}
	c := &http.Client{Transport: tr, Timeout: bound}
	ask := func(wire []byte) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, e.dohURL("/dns-query"), bytes.NewReader(wire))
		req.Header.Set("Content-Type", "application/dns-message")
		return c.Do(req)
	}
	// the connection, and cached.test in the record cache
	for range 2 {
		e.checkDoH(t, c, dohPost(t, e.dohURL("/dns-query"), query("cached.test", dns.TypeA, 1232, false)), 2, "cached.test.")
	}
	held := make(chan error, 1)
	go func() {
		resp, err := ask(holdQuery(t, "h2", 7))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if r := new(dns.Msg); resp.StatusCode != 200 || r.Unpack(body) != nil || r.Id != 7 || len(r.Answer) == 0 {
				err = fmt.Errorf("held query: %s, %d bytes", resp.Status, len(body))
			}
		}
		held <- err
	}()
	eventually(t, "the forwarder got the held query", func() bool { return e.up.held.Load() > 0 })
	for range 5 {
		e.checkDoH(t, c, dohPost(t, e.dohURL("/dns-query"), query("cached.test", dns.TypeA, 1232, false)), 2, "cached.test.")
	}
	select {
	case err := <-held:
		t.Fatalf("the held query ended before its release: %v", err)
	default:
	}
	e.up.release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}

// TestDoTHeldMissDoesNotHoldConnection: on one DoT connection, a query
// whose forwarder holds its answer does not hold the record-cache hits
// the reader answers itself: those asked after it, one at a time, and
// those read together with it (one TLS record), whose queued replies go
// out though the held query has the connection's only slot (fails with
// the reader waiting for a slot before it writes what it queued).
func TestDoTHeldMissDoesNotHoldConnection(t *testing.T) {
	e := newEncEnv(t, func(c *resolver.Config) {
		c.Upstream.Timeout = 4 * time.Second
		c.Encrypted.MaxQueriesPerConnection = 1
	})
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", e.dot, e.tlsConfig("dns.example.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hit := func(id uint16) []byte {
		m := query("cached.test", dns.TypeA, 1232, false)
		m.Id = id
		return mustPack(t, m)
	}
	want := func(id uint16) {
		t.Helper()
		b, closed := readTCP(t, c)
		if closed {
			t.Fatalf("closed before the answer to %d", id)
		}
		if r := mustUnpack(t, b); r.Id != id || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 || len(b)%468 != 0 {
			t.Fatalf("answer %v (%d bytes), want id %d's, padded", r, len(b), id)
		}
	}
	// cached.test into the record cache
	for id := uint16(1); id <= 2; id++ {
		writeTCP(t, c, hit(id))
		want(id)
	}
	// read together: a hit, the held miss, a hit
	writeTCP(t, c, hit(10), holdQuery(t, "dot", 7), hit(11))
	want(10)
	eventually(t, "the forwarder got the held query", func() bool { return e.up.held.Load() > 0 })
	e.up.release()
	// the held query had the only slot: hit 11 waited for it
	want(7)
	want(11)

	// one at a time after a held query: answered meanwhile
	e2 := newEncEnv(t, func(c *resolver.Config) { c.Upstream.Timeout = 4 * time.Second })
	c2, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", e2.dot, e2.tlsConfig("dns.example.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c = c2
	for id := uint16(1); id <= 2; id++ {
		writeTCP(t, c, hit(id))
		want(id)
	}
	writeTCP(t, c, holdQuery(t, "dot", 8))
	eventually(t, "the forwarder got the held query", func() bool { return e2.up.held.Load() > 0 })
	for id := uint16(20); id < 25; id++ {
		writeTCP(t, c, hit(id))
		want(id)
	}
	e2.up.release()
	want(8)
}
