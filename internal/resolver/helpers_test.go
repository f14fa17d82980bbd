package resolver_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// bound is the generous limit every outcome must arrive within: the tests
// run on loaded two-core machines, under -race.
const bound = 5 * time.Second

// The subscribers of the test view: one session per loopback address, each
// with its username's settings. Addresses without a session (127.0.0.1,
// 127.0.0.20 and up) get the global layer alone.
var subscribers = map[string]struct{ user, doc string }{
	"127.0.0.2": {"alice", `{"blocked_categories":[3]}`},
	"127.0.0.3": {"bob", `{"blocklist":["blocked.test"],"action":{"type":"nodata"}}`},
	"127.0.0.4": {"carol", `{"blocklist":["blocked.test"],"action":{"type":"refused"}}`},
	"127.0.0.5": {"dave", `{"blocklist":["blocked.test"],"action":{"type":"drop"}}`},
	"127.0.0.6": {"erin", `{"blocklist":["blocked.test"],"action":{"type":"redirect","a":["192.0.2.99"],"aaaa":["2001:db8::99"]}}`},
	"127.0.0.7": {"frank", `{"blocklist":["blocked.test"],"action":{"type":"cname","target":"blockpage.test"}}`},
	"127.0.0.8": {"grace", `{"filtering":false}`},
	"127.0.0.9": {"heidi", `{"schedules":[{"days":["mon","tue","wed","thu","fri","sat","sun"],"from":"00:00","to":"24:00",` +
		`"tz":"UTC","blocked_categories":[3]}],"action":{"type":"nodata"}}`},
}

// globalDoc is the operator's global layer: EDE 15 when it blocks.
const globalDoc = `{"blocklist":["global.test"]}`

// fakeSettings is a settings read model: the global document and one
// document per username.
type fakeSettings struct {
	global *settings.Document
	users  map[string]*settings.Document
}

func (f *fakeSettings) Version(string) uint64 { return 1 }

func (f *fakeSettings) Stack(org string, a identity.Attributes) settings.Stack {
	var st settings.Stack
	if f.global != nil {
		st.Global = settings.Layer{Name: settings.LayerGlobal, Doc: f.global}
	}
	if d := f.users[a.Username]; d != nil && a.Username != "" {
		st.Username = settings.Layer{Name: settings.Scope{Kind: settings.ScopeUsername, Value: a.Username}.Layer(org), Doc: d}
	}
	return st
}

// fakeCats is a feed: a name matches its own entry, else its nearest
// parent's, as feeds.Set does.
type fakeCats map[string][]feed.Category

func (f fakeCats) Lookup(name, _ string, dst []feed.Category) []feed.Category {
	for {
		if cs, ok := f[name]; ok {
			return append(dst, cs...)
		}
		i := strings.IndexByte(name, '.')
		if i < 0 {
			return dst
		}
		name = name[i+1:]
	}
}

var testCats = fakeCats{"bad.test": {{Code: 3, Title: "Malware", Feed: "threats", Name: "bad.test"}}}

func mustDoc(t testing.TB, s string) *settings.Document {
	t.Helper()
	d, err := settings.Parse([]byte(s))
	if err != nil {
		t.Fatalf("settings.Parse(%s): %v", s, err)
	}
	return d
}

// testEngine is a policy engine over the test view; rpz may be nil.
func testEngine(t testing.TB, rpz policy.RPZ) *policy.Engine {
	t.Helper()
	fs := &fakeSettings{global: mustDoc(t, globalDoc), users: map[string]*settings.Document{}}
	var sessions []*session.Session
	for ip, s := range subscribers {
		p := netip.PrefixFrom(netip.MustParseAddr(ip), 32)
		a := identity.Attributes{Username: s.user}
		sessions = append(sessions, &session.Session{ID: session.NewID(identity.Identity{Org: "acme", Attributes: a}, p),
			Org: "acme", Allocations: []netip.Prefix{p}, Attributes: a})
		fs.users[s.user] = mustDoc(t, s.doc)
	}
	ix := sessionindex.Empty().Apply(sessions, nil)
	v := policy.View{Sessions: ix, Settings: fs, Categories: testCats}
	if rpz != nil {
		v.RPZ = rpz
	}
	eng, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return v }})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// fakeUpstream is a forwarder on loopback (UDP and TCP on one port),
// answering from its zone of test names, and recording what it was asked.
// Names under never.test it never answers; names under hold.test it
// answers once release is called (or the test ends), counting in held
// those it is holding.
type fakeUpstream struct {
	addr    netip.AddrPort
	queries atomic.Int64
	mu      sync.Mutex
	seen    []seenQuery

	held        atomic.Int64
	releaseCh   chan struct{}
	releaseOnce sync.Once
}

// release answers every query held under hold.test, and those to come.
func (u *fakeUpstream) release() { u.releaseOnce.Do(func() { close(u.releaseCh) }) }

type seenQuery struct {
	name  string
	qtype uint16
	do    bool
	tcp   bool
}

// bigCount is how many A records big.test has: more than 512 bytes, less
// than 1232.
const bigCount = 60

var upstreamA = net.IPv4(192, 0, 2, 1).To4()

// upstreamURITarget is the target of the fake upstream's URI records as
// bytes on the wire: a backslash, which miekg/dns would read as an escape
// when it packs the target again.
const upstreamURITarget = `http://x/\y\065`

// startUpstream runs a fakeUpstream until the test ends.
func startUpstream(t testing.TB) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{releaseCh: make(chan struct{})}
	u.addr = serveDNS(t, dns.HandlerFunc(u.serve))
	t.Cleanup(u.release) // before the servers wait for their handlers
	return u
}

// hugeTXT is how many 255-byte strings the TXT record of a name under
// huge.test holds: a reply of about 26 KB over TCP.
const hugeTXT = 100

// serveDNS serves h over UDP and TCP on one kernel-chosen loopback port
// until the test ends, and returns that port's address once both listen.
func serveDNS(t testing.TB, h dns.Handler) netip.AddrPort {
	t.Helper()
	pc, ln := listenPair(t)
	var started sync.WaitGroup
	started.Add(2)
	us := &dns.Server{PacketConn: pc, Handler: h, NotifyStartedFunc: started.Done}
	ts := &dns.Server{Listener: ln, Handler: h, NotifyStartedFunc: started.Done}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	started.Wait()
	t.Cleanup(func() { _ = us.Shutdown(); _ = ts.Shutdown() })
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// listenPair binds UDP and TCP on one kernel-chosen loopback port.
func listenPair(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for i := 0; ; i++ {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		_ = pc.Close()
		if i == 20 {
			t.Fatal(err)
		}
	}
}

func (u *fakeUpstream) serve(w dns.ResponseWriter, req *dns.Msg) {
	u.queries.Add(1)
	if len(req.Question) != 1 {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeFormatError)
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	opt := req.IsEdns0()
	do := opt != nil && opt.Do()
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	u.mu.Lock()
	u.seen = append(u.seen, seenQuery{name: q.Name, qtype: q.Qtype, do: do, tcp: tcp})
	u.mu.Unlock()

	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: 300}
	}
	name := strings.ToLower(q.Name)
	switch {
	case strings.HasSuffix(name, ".never.test."):
		return
	case strings.HasSuffix(name, ".hold.test."):
		u.held.Add(1)
		<-u.releaseCh
		u.held.Add(-1)
	}
	switch {
	case strings.HasSuffix(name, ".huge.test.") && q.Qtype == dns.TypeTXT:
		txt := make([]string, hugeTXT)
		for i := range txt {
			txt[i] = strings.Repeat(string(rune('a'+i%26)), 255)
		}
		m.Answer = []dns.RR{&dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: txt}}
	case name == "big.test." && q.Qtype == dns.TypeA:
		for i := range bigCount {
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: net.IPv4(10, 0, byte(i/250), byte(i%250+1)).To4()})
		}
	case strings.HasPrefix(name, "nx."):
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{upstreamSOA()}
	case q.Qtype == dns.TypeA:
		m.Answer = []dns.RR{&dns.A{Hdr: hdr(dns.TypeA), A: upstreamA}}
		if do {
			m.Answer = append(m.Answer, &dns.RRSIG{Hdr: hdr(dns.TypeRRSIG), TypeCovered: dns.TypeA, Algorithm: dns.ECDSAP256SHA256,
				Labels: uint8(dns.CountLabel(q.Name)), OrigTtl: 300, Expiration: 2000000000, Inception: 1700000000, KeyTag: 4242,
				SignerName: "test.", Signature: "c2lnbmF0dXJl"})
		}
	case q.Qtype == dns.TypeAAAA:
		m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.ParseIP("2001:db8::1")}}
	case q.Qtype == dns.TypeURI: // escaped: on the wire, upstreamURITarget
		m.Answer = []dns.RR{&dns.URI{Hdr: hdr(dns.TypeURI), Priority: 1, Weight: 1,
			Target: strings.ReplaceAll(upstreamURITarget, `\`, `\\`)}}
	default:
		m.Ns = []dns.RR{upstreamSOA()}
	}
	if opt != nil {
		m.SetEdns0(1232, do)
	}
	if !tcp {
		size := dns.MinMsgSize
		if opt != nil {
			size = max(int(opt.UDPSize()), dns.MinMsgSize)
		}
		m.Truncate(size)
	}
	_ = w.WriteMsg(m)
}

func upstreamSOA() dns.RR {
	return &dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 300},
		Ns: "ns.test.", Mbox: "h.test.", Serial: 1, Refresh: 1, Retry: 1, Expire: 1, Minttl: 60}
}

// asked returns what the upstream was asked for name (any case).
func (u *fakeUpstream) asked(name string) []seenQuery {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []seenQuery
	for _, s := range u.seen {
		if strings.EqualFold(s.name, dns.Fqdn(name)) {
			out = append(out, s)
		}
	}
	return out
}

// rawUpstream is a UDP forwarder that answers every packet with what reply
// returns, after delay; it runs until the test ends.
func rawUpstream(t testing.TB, delay time.Duration, reply func(query []byte) [][]byte) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := append([]byte(nil), buf[:n]...)
			send := func() {
				for _, r := range reply(q) {
					_, _ = pc.WriteTo(r, from)
				}
			}
			if delay > 0 {
				time.AfterFunc(delay, send)
			} else {
				send()
			}
		}
	}()
	t.Cleanup(func() { _ = pc.Close(); <-done })
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// closedPort is a loopback UDP address nothing listens on: the kernel
// answers ICMP port unreachable.
func closedPort(t testing.TB) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	_ = pc.Close()
	return ap
}

// testEnv is a running resolver over the test view.
type testEnv struct {
	t        testing.TB
	r        *resolver.Resolver
	udp, tcp string
	up       *fakeUpstream
	gen      *atomic.Uint64
	// cancel ends Run, whose return closes runDone (runErr set before).
	cancel  context.CancelFunc
	runDone chan struct{}
	runErr  error
}

// newEnv starts a resolver on 127.0.0.1 (kernel-chosen port) forwarding to
// a fresh fakeUpstream; mod adjusts the config before New.
func newEnv(t testing.TB, mod func(*resolver.Config)) *testEnv {
	t.Helper()
	e := &testEnv{t: t, up: startUpstream(t), gen: new(atomic.Uint64)}
	cfg := resolver.Config{
		Listen:     []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")},
		UDPSockets: 2,
		Forwarders: []netip.AddrPort{e.up.addr},
		// An attempt's timeout far above a loaded machine's stalls, so
		// that a test counting queries to the forwarder never sees a
		// retry; the whole query still inside bound. Tests of failing
		// forwarders set short ones.
		Upstream:   upstream.Config{Timeout: 2 * time.Second, MaxTime: 4 * time.Second},
		Engine:     testEngine(t, nil),
		Generation: e.gen.Load,
		Version:    "test",
	}
	if mod != nil {
		mod(&cfg)
	}
	var err error
	for i := 0; i < 20; i++ { // the TCP port may be taken by someone else
		if e.r, err = resolver.New(cfg); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.runDone = cancel, make(chan struct{})
	go func() {
		e.runErr = e.r.Run(ctx)
		close(e.runDone)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-e.runDone:
			if e.runErr != nil {
				t.Errorf("Run: %v", e.runErr)
			}
		case <-time.After(3 * bound):
			t.Errorf("Run did not return after its context ended")
		}
	})
	e.udp = e.r.UDPAddrs()[0].String()
	e.tcp = e.r.TCPAddrs()[0].String()
	return e
}

// with is e reporting to t: a subtest's view of its parent's resolver.
func (e *testEnv) with(t testing.TB) *testEnv {
	c := *e
	c.t = t
	return &c
}

// stat reads one statistic.
func (e *testEnv) stat(name string) uint64 {
	e.t.Helper()
	it, ok := e.r.Stats().Lookup(name)
	if !ok {
		e.t.Fatalf("no statistic %q", name)
	}
	v, err := strconv.ParseUint(it.Value, 10, 64)
	if err != nil {
		e.t.Fatalf("%s = %q: %v", name, it.Value, err)
	}
	return v
}

// stats reads several statistics at once.
func (e *testEnv) stats(names ...string) map[string]uint64 {
	e.t.Helper()
	out := make(map[string]uint64, len(names))
	for _, n := range names {
		out[n] = e.stat(n)
	}
	return out
}

// waitStat waits until the statistic is at least want.
func (e *testEnv) waitStat(name string, want uint64) {
	e.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		v := e.stat(name)
		if v >= want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s = %d, want ≥ %d within %v", name, v, want, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantMoved checks that each statistic moved by exactly delta since
// before; what says when.
// A statistic moves just after its reply is written, so a test that has
// read the reply waits (up to bound) for the figure.
func (e *testEnv) wantMoved(what string, before map[string]uint64, delta map[string]uint64) {
	e.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		var wrong []string
		for n, d := range delta {
			if got := e.stat(n) - before[n]; got != d {
				wrong = append(wrong, fmt.Sprintf("%s moved by %d, want %d", n, got, d))
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(wrong)
			e.t.Errorf("%s: %s", what, strings.Join(wrong, "; "))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawUDP sends pkt over UDP from the local address and returns the reply's
// bytes as they came.
func (e *testEnv) rawUDP(from string, pkt []byte) []byte {
	e.t.Helper()
	c := e.udpClient(from)
	if _, err := c.Write(pkt); err != nil {
		e.t.Fatal(err)
	}
	b := readUDP(e.t, c, bound)
	if b == nil {
		e.t.Fatalf("no UDP reply within %v", bound)
	}
	return b
}

// query builds a query with recursion desired; udpSize 0 means no EDNS.
func query(name string, qtype uint16, udpSize uint16, do bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	if udpSize > 0 {
		m.SetEdns0(udpSize, do)
	}
	return m
}

// ask sends m over UDP or TCP from the local address from ("" for
// 127.0.0.1) and waits at most bound; a nil reply is no answer in time.
func (e *testEnv) ask(netw, from string, m *dns.Msg) *dns.Msg {
	e.t.Helper()
	server := e.udp
	if netw == "tcp" {
		server = e.tcp
	}
	r, err := exchange(netw, from, server, m, bound)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		e.t.Fatalf("%s query %v from %s: %v", netw, m.Question, from, err)
	}
	return r
}

func exchange(netw, from, server string, m *dns.Msg, timeout time.Duration) (*dns.Msg, error) {
	if from == "" {
		from = "127.0.0.1"
	}
	var local net.Addr = &net.UDPAddr{IP: net.ParseIP(from)}
	if netw == "tcp" {
		local = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c := &dns.Client{Net: netw, Timeout: timeout, UDPSize: 65535,
		Dialer: &net.Dialer{LocalAddr: local, Timeout: timeout}}
	r, _, err := c.Exchange(m, server)
	return r, err
}

// mustAsk is ask that fails the test on no answer.
func (e *testEnv) mustAsk(netw, from string, m *dns.Msg) *dns.Msg {
	e.t.Helper()
	r := e.ask(netw, from, m)
	if r == nil {
		e.t.Fatalf("%s %v from %s: no answer within %v", netw, m.Question, from, bound)
	}
	return r
}

// udpClient is a UDP socket connected to the resolver, for raw packets.
func (e *testEnv) udpClient(from string) *net.UDPConn {
	e.t.Helper()
	if from == "" {
		from = "127.0.0.1"
	}
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(from)}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(e.udp)))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// readUDP reads one datagram within d; nil on timeout.
func readUDP(t testing.TB, c *net.UDPConn, d time.Duration) []byte {
	t.Helper()
	buf := make([]byte, 65535)
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		t.Fatalf("read: %v", err)
	}
	return buf[:n]
}

// tcpClient is a TCP connection to the resolver from the local address.
func (e *testEnv) tcpClient(from string) *net.TCPConn {
	e.t.Helper()
	if from == "" {
		from = "127.0.0.1"
	}
	c, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.ParseIP(from)}, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(e.tcp)))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// writeTCP writes length-prefixed messages.
func writeTCP(t testing.TB, c net.Conn, msgs ...[]byte) {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	_ = c.SetWriteDeadline(time.Now().Add(bound))
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// readTCP reads one length-prefixed message; closed is true when the
// server closed the connection (EOF or reset) instead.
func readTCP(t testing.TB, c net.Conn) (msg []byte, closed bool) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(bound))
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("TCP: neither an answer nor a close within %v", bound)
		}
		return nil, true
	}
	msg = make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, msg); err != nil {
		t.Fatalf("TCP: message cut: %v", err)
	}
	return msg, false
}

func mustPack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustUnpack(t testing.TB, b []byte) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack %x: %v", b, err)
	}
	return m
}

// edeOf returns the reply's Extended DNS Error.
func edeOf(m *dns.Msg) (*dns.EDNS0_EDE, bool) {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				return e, true
			}
		}
	}
	return nil, false
}
