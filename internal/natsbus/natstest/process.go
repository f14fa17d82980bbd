package natstest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ServerBinary is the nats-server a Process runs: a real, separate server
// process, for the tests that kill it with SIGKILL (which an embedded server
// cannot be).
const ServerBinary = "/usr/sbin/nats-server"

// Process is a nats-server process with JetStream, a store directory that
// survives Kill and Start, and its HTTP monitoring port (for /subsz). Both
// ports are chosen by the kernel once and kept across restarts, so clients
// reconnect to the same address.
type Process struct {
	t       testing.TB
	dir     string
	port    int
	monitor int
	log     *LogBuffer

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartProcess starts a nats-server process on loopback; it is killed when
// the test ends.
func StartProcess(t testing.TB) *Process {
	t.Helper()
	p := &Process{t: t, dir: t.TempDir(), port: freePort(t), monitor: freePort(t), log: &LogBuffer{}}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("nats-server log:\n%s", p.log.String())
		}
	})
	p.Start()
	return p
}

// freePort returns a free loopback port below the kernel's ephemeral
// range. A Process keeps its ports across Kill and Start, and while it is
// down (a minute, in some tests) a port from the ephemeral range can be
// taken by any outgoing connection of the machine — the restart then
// fails with "address already in use" (seen in CI). Below the range only
// an explicit bind can take it.
func freePort(t testing.TB) int {
	t.Helper()
	low := 32768 // Linux's default start of ip_local_port_range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 200 {
		port := 10000 + rand.IntN(low-10000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("natstest: no free loopback port below %d in 200 tries", low)
	return 0
}

// URL is the nats:// URL clients connect to.
func (p *Process) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

// Start (re)starts the server over the same store and ports and waits until
// its monitoring endpoint answers.
func (p *Process) Start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.t.Fatal("natstest: nats-server already running")
	}
	cmd := exec.Command(ServerBinary, "-js", "-sd", p.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(p.port),
		"-m", strconv.Itoa(p.monitor), "-n", "natstest")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("natstest: start %s: %v", ServerBinary, err)
	}
	p.cmd = cmd
	deadline := time.Now().Add(Wait)
	for {
		// /healthz answers 200 once JetStream is up too.
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", p.monitor))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("natstest: nats-server not ready after %v: %v\n%s", Wait, err, p.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server with SIGKILL (nothing of it is flushed or said to
// its clients) and waits until it is gone. Killing a stopped server is a
// no-op.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// Subscription is one client subscription as the server holds it
// (monitoring endpoint /subsz).
type Subscription struct {
	Subject string `json:"subject"`
	Queue   string `json:"qgroup"`
	SID     string `json:"sid"`
	CID     uint64 `json:"cid"`
}

// Subscriptions lists the server's subscriptions on subjects with the given
// prefix: the truth about who the server delivers to, whatever its clients
// believe.
func (p *Process) Subscriptions(prefix string) []Subscription {
	p.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/subsz?subs=1&limit=100000", p.monitor))
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Subs []Subscription `json:"subscriptions_list"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		p.t.Fatal(err)
	}
	var out []Subscription
	for _, s := range body.Subs {
		if strings.HasPrefix(s.Subject, prefix) {
			out = append(out, s)
		}
	}
	return out
}
