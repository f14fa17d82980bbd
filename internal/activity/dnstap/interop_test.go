package dnstap_test

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/miekg/dns"
)

// The interoperability tests run the writer against dnstap readers
// written elsewhere, as Debian ships them:
//
//   - golang-dnstap's `dnstap` command (package
//     golang-github-dnstap-golang-dnstap-cli), reading a Unix socket (-u)
//     or TCP (-l) and printing YAML as messages come;
//   - fstrm's reference reader `fstrm_capture` (package fstrm-bin, the C
//     Frame Streams library's), writing what it reads to a file, which
//     `dnstap-ldns` (package dnstap-ldns: the C protobuf decoder and
//     ldns's message printer) then prints as YAML.
//
// Each gets a blocked and an allowed name over UDP and over TCP from a
// real resolver, and must show, for each query, its name and type, the
// client's address and port, the transport and the reply's rcode.

// asked is one query the test sent, as a reader must show it.
type asked struct {
	netw, name string
	qtype      uint16
	rcode      int
	client     netip.AddrPort
}

// askAll asks blocked.test A and allowed.test AAAA over UDP and TCP.
func askAll(t *testing.T, udp, tcp string) []asked {
	t.Helper()
	var out []asked
	for _, q := range []struct {
		name  string
		qtype uint16
		rcode int
	}{{"blocked.test", dns.TypeA, dns.RcodeNameError}, {"allowed.test", dns.TypeAAAA, dns.RcodeSuccess}} {
		for _, netw := range []string{"udp", "tcp"} {
			server := udp
			if netw == "tcp" {
				server = tcp
			}
			r, from := ask(t, netw, server, q.name, q.qtype)
			if r.Rcode != q.rcode {
				t.Fatalf("%s %s: the resolver answered rcode %d, want %d", netw, q.name, r.Rcode, q.rcode)
			}
			out = append(out, asked{netw: netw, name: q.name, qtype: q.qtype, rcode: q.rcode, client: from})
		}
	}
	return out
}

// yamlDocs splits a reader's YAML output into its documents (messages).
func yamlDocs(out string) []string {
	var docs []string
	for _, d := range strings.Split(out, "\n---") {
		if strings.Contains(d, "message:") {
			docs = append(docs, d)
		}
	}
	return docs
}

// findQuery returns the document of the message whose client port is q's.
func findQuery(docs []string, q asked) string {
	for _, d := range docs {
		if strings.Contains(d, fmt.Sprintf("query_port: %d\n", q.client.Port())) {
			return d
		}
	}
	return ""
}

// checkShown checks that a reader's YAML document shows everything the
// test knows of q.
func checkShown(t *testing.T, reader string, docs []string, q asked, out string) {
	t.Helper()
	d := findQuery(docs, q)
	if d == "" {
		t.Errorf("%s: no message with query_port %d (%s %s); its output:\n%s", reader, q.client.Port(), q.netw, q.name, out)
		return
	}
	// Both readers print the messages with a dig-like printer: the
	// question as ";name<TAB>IN<TAB>...TYPE", the rcode as "status: X".
	// golang-dnstap prints "status: NXDOMAIN" and the address bare,
	// dnstap-ldns "rcode: NXDOMAIN" and the address quoted.
	question := ";" + q.name + ".\tIN"
	plain := strings.ReplaceAll(d, `"`, "")
	want := []string{
		"type: CLIENT_RESPONSE", "identity: node-1\n", "version: svc-pf test\n",
		"socket_family: INET\n", "socket_protocol: " + strings.ToUpper(q.netw) + "\n",
		"query_address: " + q.client.Addr().String() + "\n",
	}
	if miss := contains(plain, want...); miss != "" {
		t.Errorf("%s: %s %s: %q not in its message:\n%s", reader, q.netw, q.name, miss, d)
	}
	_, resp, _ := strings.Cut(d, "response_message:")
	rcode := dns.RcodeToString[q.rcode]
	if !strings.Contains(resp, "status: "+rcode+",") && !strings.Contains(resp, "rcode: "+rcode+",") {
		t.Errorf("%s: %s %s: the response's rcode is not shown as %s:\n%s", reader, q.netw, q.name, rcode, d)
	}
	// The question, in the query and in the reply: twice.
	if n := countQuestion(d, question, dns.TypeToString[q.qtype]); n != 2 {
		t.Errorf("%s: %s %s: the question %s %s shown %d times, want 2 (query and reply):\n%s", reader, q.netw, q.name,
			q.name, dns.TypeToString[q.qtype], n, d)
	}
}

// countQuestion counts the lines of d that are the question prefix then
// the type (printers differ in the spacing before it).
func countQuestion(d, prefix, typ string) int {
	n := 0
	for _, line := range strings.Split(d, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, prefix); ok && strings.TrimSpace(rest) == typ {
			n++
		}
	}
	return n
}

// readerAddr is where a reader listens for network: a Unix socket in a
// test directory, or a loopback TCP port.
func readerAddr(t *testing.T, network string) string {
	if network == "unix" {
		return filepath.Join(t.TempDir(), "dnstap.sock")
	}
	return freeTCPPort(t)
}

// TestGolangDnstapReads: golang-dnstap's reader, on a Unix socket and on
// TCP, shows the four queries.
func TestGolangDnstapReads(t *testing.T) {
	bin := tool(t, "dnstap", "golang-github-dnstap-golang-dnstap-cli")
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			addr := readerAddr(t, network)
			flag := map[string]string{"unix": "-u", "tcp": "-l"}[network]
			p := startProcess(t, bin, flag, addr, "-y")
			w, reg, _ := startWriter(t, network+":"+addr, 0)
			udp, tcp := startResolver(t, w)
			qs := askAll(t, udp, tcp)
			waitFor(t, "the reader shows 4 messages", func() bool { return len(yamlDocs(p.out.String())) >= 4 })
			out := p.out.String()
			docs := yamlDocs(out)
			if len(docs) != 4 {
				t.Errorf("%d messages, want 4:\n%s", len(docs), out)
			}
			for _, q := range qs {
				checkShown(t, "golang-dnstap", docs, q, out)
			}
			// Counted once the write returned, which may be after the
			// reader printed.
			waitFor(t, "4 counted sent", func() bool { return metric(t, reg, "svcpf_dnstap_sent_total", "") >= 4 })
			if n := metric(t, reg, "svcpf_dnstap_sent_total", ""); n != 4 {
				t.Errorf("svcpf_dnstap_sent_total %v, want 4", n)
			}
		})
	}
}

// TestFstrmCaptureAndDnstapLdnsRead: fstrm_capture takes the stream, on a
// Unix socket and on TCP, into a file; the writer's STOP ends it, the
// reader's FINISH answers; dnstap-ldns reads the file back and shows the
// four queries.
func TestFstrmCaptureAndDnstapLdnsRead(t *testing.T) {
	capture := tool(t, "fstrm_capture", "fstrm-bin")
	ldns := tool(t, "dnstap-ldns", "dnstap-ldns")
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			addr := readerAddr(t, network)
			file := filepath.Join(t.TempDir(), "capture.fstrm")
			args := []string{"-t", "protobuf:dnstap.Dnstap", "-w", file}
			if network == "unix" {
				args = append(args, "-u", addr)
			} else {
				host, port, _ := net.SplitHostPort(addr)
				args = append(args, "-a", host, "-p", port)
			}
			p := startProcess(t, capture, args...)
			w, reg, stop := startWriter(t, network+":"+addr, 0)
			udp, tcp := startResolver(t, w)
			qs := askAll(t, udp, tcp)
			waitFor(t, "4 messages sent", func() bool { return metric(t, reg, "svcpf_dnstap_sent_total", "") == 4 })
			// The writer's STOP, answered by FINISH once fstrm_capture
			// has read every frame before it; then the capture ends
			// (SIGTERM closes its file properly).
			stop()
			p.stop(t, syscall.SIGTERM)
			out, err := exec.Command(ldns, "-y", "-r", file).CombinedOutput()
			if err != nil {
				t.Fatalf("dnstap-ldns -y -r %s: %v; fstrm_capture said:\n%s\ndnstap-ldns said:\n%s", file, err, p.out.String(), out)
			}
			docs := yamlDocs(string(out))
			if len(docs) != 4 {
				t.Errorf("dnstap-ldns shows %d messages, want 4:\n%s", len(docs), out)
			}
			for _, q := range qs {
				checkShown(t, "dnstap-ldns", docs, q, string(out))
			}
		})
	}
}

// TestReaderRestarts: the reader killed (-9) mid-stream and started again
// on the same path: the writer notices, queues what it can (the queue's
// 4), drops and counts the rest, reconnects by itself and delivers the
// queued queries (any four: misses reach the observer in no fixed
// order) and those after.
func TestReaderRestarts(t *testing.T) {
	bin := tool(t, "dnstap", "golang-github-dnstap-golang-dnstap-cli")
	sock := filepath.Join(t.TempDir(), "dnstap.sock")
	p := startProcess(t, bin, "-u", sock, "-y")
	const queue = 4
	w, reg, _ := startWriter(t, "unix:"+sock, queue)
	udp, _ := startResolver(t, w)
	connected := func(v float64) func() bool {
		return func() bool { return metric(t, reg, "svcpf_dnstap_connected", "") == v }
	}

	ask(t, "udp", udp, "before.test", dns.TypeA)
	waitFor(t, "the first reader shows before.test", func() bool { return strings.Contains(p.out.String(), ";before.test.") })

	p.stop(t, syscall.SIGKILL)
	waitFor(t, "the writer sees the reader gone", connected(0))
	// The dead reader's socket file is left behind: connecting is
	// refused until the new reader replaces it.
	const during = 10
	for i := range during {
		ask(t, "udp", udp, "during"+strconv.Itoa(i)+".test", dns.TypeA)
	}
	// Disconnected, the writer takes no query off the queue: four
	// wait, the other six are dropped. (The resolver tells its
	// observer after the client has its reply: wait for the count.)
	dropped := func() float64 { return metric(t, reg, "svcpf_dnstap_dropped_total", "queue_full") }
	waitFor(t, "6 dropped", func() bool { return dropped() >= during-queue })
	if n := dropped(); n != during-queue {
		t.Errorf("dropped (queue_full) %v while the reader was away, want %d", n, during-queue)
	}

	p2 := startProcess(t, bin, "-u", sock, "-y")
	waitFor(t, "the writer reconnects", connected(1))
	ask(t, "udp", udp, "after.test", dns.TypeA)
	waitFor(t, "the new reader shows after.test", func() bool { return strings.Contains(p2.out.String(), ";after.test.") })
	// Which four waited is not fixed: each query was a cache miss,
	// answered on a goroutine of its own, so the observer can hear of
	// them in another order than they were asked.
	out := p2.out.String()
	shown := 0
	for i := range during {
		if strings.Contains(out, ";during"+strconv.Itoa(i)+".test.") {
			shown++
		}
	}
	if shown != queue {
		t.Errorf("the new reader shows %d of the %d queries asked while it was away, want the queue's %d:\n%s", shown, during, queue, out)
	}
	sent := func() float64 { return metric(t, reg, "svcpf_dnstap_sent_total", "") }
	waitFor(t, "the sent count", func() bool { return sent() >= 1+queue+1 })
	if n := sent(); n != 1+queue+1 {
		t.Errorf("svcpf_dnstap_sent_total %v, want %d", n, 1+queue+1)
	}
}
