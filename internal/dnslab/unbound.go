package dnslab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/miekg/dns"
)

// UnboundOptions configures the reference resolver.
type UnboundOptions struct {
	// Validate runs unbound's validator with the lab's root trust anchor
	// ("validator iterator"); otherwise only the iterator runs.
	Validate bool
	// Extra is appended to the server: clause as is.
	Extra string
}

// StartUnbound starts unbound on the lab's reference address, port 53,
// with the lab's root hints, and returns that address once it answers. It
// stops with the test.
func (l *Lab) StartUnbound(o UnboundOptions) netip.AddrPort {
	t := l.t
	t.Helper()
	Need(t, "/usr/sbin/unbound", "unbound")
	dir, addr := l.reference("unbound", o.Validate)
	modules := "iterator"
	anchor := ""
	if o.Validate {
		ta := filepath.Join(dir, "root.anchor")
		if err := os.WriteFile(ta, []byte(l.TrustAnchor+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		modules = "validator iterator"
		anchor = fmt.Sprintf("\ttrust-anchor-file: %q\n", ta)
	}
	logFile := filepath.Join(dir, "unbound.log")
	conf := fmt.Sprintf(`server:
	interface: %s
	port: 53
	interface-automatic: no
	do-ip4: yes
	do-ip6: no
	do-udp: yes
	do-tcp: yes
	access-control: 127.0.0.0/8 allow
	do-not-query-localhost: no
	root-hints: %q
	module-config: %q
%s	username: ""
	chroot: ""
	directory: %q
	pidfile: %q
	logfile: %q
	use-syslog: no
	num-threads: 1
	verbosity: 1
	so-reuseport: no
	# test. is a special-use name that unbound answers itself by default;
	# in the lab it is a real TLD.
	local-zone: "test." nodefault
%s
remote-control:
	control-enable: no
`, addr.Addr(), l.HintsFile(), modules, anchor, dir, filepath.Join(dir, "unbound.pid"), logFile, o.Extra)
	cf := filepath.Join(dir, "unbound.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	l.startProcess("unbound", logFile, "/usr/sbin/unbound", "-d", "-c", cf)
	// localhost. is a local zone of unbound's.
	l.awaitLocalhost("unbound", addr)
	return addr
}

// reference makes the configuration directory of the reference resolver
// name and returns it with the resolver's address (port 53 on its lab
// address); a validating resolver needs the signed root's trust anchor.
func (l *Lab) reference(name string, validate bool) (dir string, addr netip.AddrPort) {
	t := l.t
	t.Helper()
	if validate && l.TrustAnchor == "" {
		t.Fatal("dnslab: Validate with an unsigned root")
	}
	dir = filepath.Join(l.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, netip.AddrPortFrom(l.addrs[name], 53)
}

// awaitLocalhost returns once the reference resolver what on addr answers
// localhost. itself: that says it listens without asking the lab anything.
func (l *Lab) awaitLocalhost(what string, addr netip.AddrPort) {
	t := l.t
	t.Helper()
	deadline := time.Now().Add(StartWait)
	for {
		r, err := Query(context.Background(), addr, "localhost.", dns.TypeA, true)
		if err == nil && r.Rcode == dns.RcodeSuccess {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dnslab: %s on %s does not answer: %v %v", what, addr, err, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
