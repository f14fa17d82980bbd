package radius

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"layeh.com/radius"
	"layeh.com/radius/rfc2865"
	"layeh.com/radius/rfc2866"
	"layeh.com/radius/rfc2869"

	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
)

const testSecret = "s3cret-for-tests"

// env is an embedded NATS server, a real IP Mapper on it, and a started
// RADIUS server writing to it.
type env struct {
	t      testing.TB
	srv    *natsbus.Embedded
	dir    string
	nc     *nats.Conn
	mapper *ipmapper.Service
	client *mapperclient.Client
	rec    *recorder
	reg    *prometheus.Registry
	rs     *Server
	addr   netip.AddrPort
	cancel context.CancelFunc
	done   chan struct{}
}

func baseConfig() Config {
	return Config{
		Listen:       []string{"127.0.0.1:0"},
		Clients:      []ClientConfig{{Network: "127.0.0.0/8", Secret: testSecret, Org: "acme"}},
		Realms:       map[string]string{"example.net": "netco"},
		WriteTimeout: 2 * time.Second,
	}
}

func startEnv(t testing.TB, mod func(*Config)) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), reg: prometheus.NewRegistry()}
	var err error
	if e.srv, err = natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: e.dir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.srv.Shutdown() })
	if e.nc, err = natsbus.Connect(e.srv.ClientURL(), "radius-test", nil, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	e.startMapper()
	if e.client, err = mapperclient.NewClient(mapperclient.ClientConfig{Conn: e.nc, Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig()
	if mod != nil {
		mod(&cfg)
	}
	e.rec = &recorder{Mapper: e.client}
	// A fuzz target's F may not log from inside its function.
	log := slog.New(slog.DiscardHandler)
	if _, fuzz := t.(*testing.F); !fuzz {
		log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	if e.rs, err = New(ServerConfig{Config: cfg, Mapper: e.rec, Registerer: e.reg, Logger: log}); err != nil {
		t.Fatal(err)
	}
	if err := e.rs.Listen(); err != nil {
		t.Fatal(err)
	}
	e.addr = e.rs.Addrs()[0]
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go func() {
		defer close(e.done)
		_ = e.rs.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-e.done
	})
	return e
}

// startMapper starts an IP Mapper on the env's NATS.
func (e *env) startMapper() {
	e.t.Helper()
	m, err := ipmapper.New(ipmapper.Config{Conn: e.nc, SweepInterval: time.Hour, LockTTL: time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.mapper = m
	e.t.Cleanup(func() { _ = m.Stop() })
}

// nas is a RADIUS client socket.
type nas struct {
	t      testing.TB
	conn   *net.UDPConn
	secret []byte
	to     netip.AddrPort
}

func (e *env) nas(secret string) *nas {
	e.t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return &nas{t: e.t, conn: c, secret: []byte(secret), to: e.addr}
}

// acct builds an Accounting-Request.
func (n *nas) acct(status rfc2866.AcctStatusType, sid string, attrs ...func(*radius.Packet)) *radius.Packet {
	p := radius.New(radius.CodeAccountingRequest, n.secret)
	_ = rfc2866.AcctStatusType_Set(p, status)
	if sid != "" {
		_ = rfc2866.AcctSessionID_SetString(p, sid)
	}
	for _, a := range attrs {
		a(p)
	}
	return p
}

func framedIP(ip string) func(*radius.Packet) {
	return func(p *radius.Packet) { _ = rfc2865.FramedIPAddress_Set(p, net.ParseIP(ip)) }
}

func userName(u string) func(*radius.Packet) {
	return func(p *radius.Packet) { _ = rfc2865.UserName_SetString(p, u) }
}

func callingStation(v string) func(*radius.Packet) {
	return func(p *radius.Packet) { _ = rfc2865.CallingStationID_SetString(p, v) }
}

func sessionTime(s uint32) func(*radius.Packet) {
	return func(p *radius.Packet) { _ = rfc2866.AcctSessionTime_Set(p, rfc2866.AcctSessionTime(s)) }
}

func eventTime(ts time.Time) func(*radius.Packet) {
	return func(p *radius.Packet) { _ = rfc2869.EventTimestamp_Set(p, ts) }
}

// encode is the packet's wire form (Request Authenticator computed).
func (n *nas) encode(p *radius.Packet) []byte {
	b, err := p.Encode()
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// send sends raw bytes and waits up to wait for a response, which it
// checks against the request; nil when none came.
func (n *nas) send(b []byte, wait time.Duration) *radius.Packet {
	n.t.Helper()
	if _, err := n.conn.WriteToUDPAddrPort(b, n.to); err != nil {
		n.t.Fatal(err)
	}
	return n.recv(b, wait)
}

func (n *nas) recv(req []byte, wait time.Duration) *radius.Packet {
	n.t.Helper()
	buf := make([]byte, 4096)
	_ = n.conn.SetReadDeadline(time.Now().Add(wait))
	for {
		k, err := n.conn.Read(buf)
		if err != nil {
			return nil
		}
		if k < 20 || buf[1] != req[1] {
			continue // an answer to an earlier request
		}
		if !radius.IsAuthenticResponse(buf[:k], req, n.secret) {
			n.t.Fatalf("response with a bad Response Authenticator")
		}
		p, err := radius.Parse(buf[:k], n.secret)
		if err != nil {
			n.t.Fatal(err)
		}
		if p.Code != radius.CodeAccountingResponse {
			n.t.Fatalf("response code %v", p.Code)
		}
		return p
	}
}

// exchange sends p and requires an answer.
func (n *nas) exchange(p *radius.Packet) []byte {
	n.t.Helper()
	b := n.encode(p)
	if n.send(b, 5*time.Second) == nil {
		n.t.Fatalf("no Accounting-Response")
	}
	return b
}

// sessions are the IP Mapper's sessions of org.
func (e *env) sessions(org string) []session.Session {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ss, err := e.client.GetSessions(ctx, mapperclient.Query{Org: org})
	if err != nil {
		e.t.Fatal(err)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].Username < ss[j].Username })
	return ss
}

func (e *env) byIP(ip string) []session.Session {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ss, err := e.client.GetSessions(ctx, mapperclient.Query{IP: netip.MustParseAddr(ip)})
	if err != nil {
		e.t.Fatal(err)
	}
	return ss
}

func (e *env) count(vec string, labels ...string) float64 {
	e.t.Helper()
	switch vec {
	case "requests":
		return testutil.ToFloat64(e.rs.m.requests.WithLabelValues(labels...))
	case "dropped":
		return testutil.ToFloat64(e.rs.m.dropped.WithLabelValues(labels...))
	}
	e.t.Fatalf("no metric %s", vec)
	return 0
}

// recorder passes every call to the real IP Mapper client and keeps what
// the server asked for: the producer it sets on sessions and cleans.
type recorder struct {
	Mapper
	mu     sync.Mutex
	sets   []session.Session
	cleans []mapperclient.CleanRequest
}

func (r *recorder) SetSessionBatchTTL(ctx context.Context, ss []session.Session, ttl time.Duration) (int, error) {
	r.mu.Lock()
	r.sets = append(r.sets, ss...)
	r.mu.Unlock()
	return r.Mapper.SetSessionBatchTTL(ctx, ss, ttl)
}

func (r *recorder) CleanSessions(ctx context.Context, c mapperclient.CleanRequest) (int, error) {
	r.mu.Lock()
	r.cleans = append(r.cleans, c)
	r.mu.Unlock()
	return r.Mapper.CleanSessions(ctx, c)
}

// producersAllRADIUS fails unless every session written and every clean
// sent named the producer radius.
func (r *recorder) producersAllRADIUS(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		t.Fatal("nothing written")
	}
	for _, s := range r.sets {
		if s.Producer != session.ProducerRADIUS {
			t.Fatalf("session %s written with producer %q", s.ID, s.Producer)
		}
	}
	for _, c := range r.cleans {
		if c.Producer != session.ProducerRADIUS {
			t.Fatalf("clean %+v without producer radius", c)
		}
	}
}

// testWriter sends the server's log lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}
