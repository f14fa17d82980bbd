package dnstap_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/activity/dnstap"
	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// bound is the generous limit every outcome must arrive within: the tests
// run on loaded two-core machines, under -race.
const bound = 10 * time.Second

// globalSettings is the global layer alone: blocked.test is blocked
// (NXDOMAIN, the default action); everything else is asked of the
// forwarder.
type globalSettings struct{ doc *settings.Document }

func (g globalSettings) Version(string) uint64 { return 1 }
func (g globalSettings) Stack(string, identity.Attributes) settings.Stack {
	return settings.Stack{Global: settings.Layer{Name: settings.LayerGlobal, Doc: g.doc}}
}

type noCategories struct{}

func (noCategories) Lookup(_, _ string, dst []feed.Category) []feed.Category { return dst }

// startUpstream is a forwarder on loopback answering every A query with
// 192.0.2.1, until the test ends.
func startUpstream(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	s := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) },
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(req)
			m.RecursionAvailable = true
			if q := req.Question; len(q) == 1 && q[0].Qtype == dns.TypeA {
				m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
					A: net.IPv4(192, 0, 2, 1)}}
			}
			_ = w.WriteMsg(m)
		})}
	go func() { _ = s.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = s.Shutdown() })
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// startResolver runs a real resolver on 127.0.0.1 (kernel-chosen port,
// UDP and TCP) with obs as its observer; it returns the UDP and TCP
// addresses.
func startResolver(t *testing.T, obs resolver.Observer) (udp, tcp string) {
	t.Helper()
	doc, err := settings.Parse([]byte(`{"blocklist":["blocked.test"]}`))
	if err != nil {
		t.Fatal(err)
	}
	v := policy.View{Sessions: sessionindex.Empty(), Settings: globalSettings{doc}, Categories: noCategories{}}
	eng, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return v }})
	if err != nil {
		t.Fatal(err)
	}
	cfg := resolver.Config{
		Listen:     []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")},
		UDPSockets: 1,
		Forwarders: []netip.AddrPort{startUpstream(t)},
		Upstream:   upstream.Config{Timeout: 2 * time.Second, MaxTime: 4 * time.Second},
		Engine:     eng,
		Version:    "test",
		Observer:   obs,
	}
	var r *resolver.Resolver
	for range 20 { // the TCP port beside the UDP one may be taken
		if r, err = resolver.New(cfg); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("resolver Run: %v", err)
		}
	})
	return r.UDPAddrs()[0].String(), r.TCPAddrs()[0].String()
}

// ask sends one query for name over netw ("udp" or "tcp") and returns the
// reply and the client's address it came from.
func ask(t *testing.T, netw, server, name string, qtype uint16) (*dns.Msg, netip.AddrPort) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: netw, Timeout: bound}
	conn, err := c.Dial(server)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	local, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := c.ExchangeWithConn(m, conn)
	if err != nil {
		t.Fatalf("%s %s: %v", netw, name, err)
	}
	return r, local
}

// startWriter makes a Writer for socket and runs it until stop is called
// or the test ends; Run must return nil once its context ends.
func startWriter(t *testing.T, socket string, queue int) (w *dnstap.Writer, reg *prometheus.Registry, stop func()) {
	t.Helper()
	reg = prometheus.NewRegistry()
	w, err := dnstap.New(dnstap.Config{Socket: socket, Identity: "node-1", Version: "svc-pf test", Queue: queue, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("writer Run: %v", err)
				}
			case <-time.After(bound):
				t.Errorf("writer Run did not return within %v of its context's end", bound)
			}
		})
	}
	t.Cleanup(stop)
	return w, reg, stop
}

// metric reads one of the writer's metrics (reason: the dropped counter's
// label, "" for the others).
func metric(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if reason != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != reason) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// waitFor polls cond until it holds, failing the test after bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tool finds a reader's binary; missing, the test fails saying how to
// install it (CI's .ci/run installs it: no skip).
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (%v): install Debian's %s (apt-get install -y %s), as .ci/run does", name, err, pkg, pkg)
	}
	return p
}

// syncBuffer is a bytes.Buffer a process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// process is a reader running until stopped or the test ends.
type process struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

func startProcess(t *testing.T, name string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(t, os.Kill) })
	return p
}

// stop signals the process and waits for it to end.
func (p *process) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(bound):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not end within %v of %v", p.cmd.Path, bound, sig)
	}
}

// freeTCPPort is a loopback address whose port the kernel chose and that
// nothing listens on now: for a reader that takes a port, not a socket.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func contains(s string, subs ...string) string {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return sub
		}
	}
	return ""
}
