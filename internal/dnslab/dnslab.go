// Package dnslab is the test bench of the recursor: a small DNS tree — a
// root, top-level domains and zones below them — served by real
// authoritative servers (nsd, one process per server address, or a Go
// handler for servers that must misbehave) on loopback addresses, port 53.
// It is used by tests only, but it is a normal package so that several test
// packages can build a lab.
//
// A lab is described in Go (Desc: servers and zones), built in a temporary
// directory (zone files, keys and signatures made with ldns-keygen,
// ldns-signzone and ldns-key2ds, one nsd.conf per server), started, waited
// for, and stopped when the test ends. It hands back the root hints (zone
// file text, as named.root) and the root's trust anchor, which the resolver
// under test and a reference resolver (unbound, StartUnbound) are both
// given, so that their answers can be compared. There are two reference
// resolvers, each on an address of its own in the lab's /24: unbound
// (StartUnbound, .250) and PowerDNS Recursor (StartPdnsRecursor, .251).
//
// Addresses: each lab takes a /24 of its own, 127.53.N.0/24 with N picked at
// random, held for the lab's life by an exclusive lock on a file in the
// system's temporary directory and checked free by binding port 53 on each
// address, so that labs in test packages running at the same time do not
// collide. Port 53 on loopback addresses other than 127.0.0.1 needs root
// (or CAP_NET_BIND_SERVICE), as in CI.
package dnslab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Server is one authoritative server of the lab, on an address of its own.
type Server struct {
	// Name identifies the server in the description: zone records write
	// %Name% where the server's address goes (glue, address records).
	Name string
	// Host is the server's own host name (a FQDN): the root's servers are
	// named by it in the root hints.
	Host string
	// Zones are the zones it serves. A server with none answers REFUSED to
	// everything: a lame delegation's target.
	Zones []string
	// Handler, when set, answers instead of nsd: a Go server on the
	// address (UDP and TCP), for servers that must misbehave (drop EDNS,
	// truncate, inject records). Zones is then only informative.
	Handler dns.Handler
}

// Zone is one zone's content.
type Zone struct {
	// Name is the zone's apex, a FQDN ("." for the root).
	Name string
	// Records is zone-file text with $ORIGIN set to Name and $TTL 3600;
	// %server% is replaced by that server's address. The parent's DS
	// record of a signed child is added by the lab.
	Records string
	// Signed zones get a KSK and a ZSK (ECDSA P-256) and are signed with
	// ldns-signzone; the DS goes to the parent zone unless NoDS.
	Signed bool
	// NSEC3 signs with NSEC3 (no salt, no extra iterations) instead of
	// NSEC; OptOut sets the opt-out flag.
	NSEC3, OptOut bool
	// NoDS leaves the parent without this signed zone's DS: an island of
	// security, insecure from the root.
	NoDS bool
	// Break damages a signed zone in one way a validator must notice;
	// BreakName is the owner (relative to the zone, or a FQDN) whose
	// signatures BadSig and NoSig damage.
	Break     Break
	BreakName string
}

// Break is a way a signed zone is made bogus.
type Break int

const (
	// Intact: nothing broken.
	Intact Break = iota
	// Expired: every signature expired in 2020.
	Expired
	// NotYetValid: every signature's inception is in 2100.
	NotYetValid
	// WrongDS: the parent's DS is that of a key the zone does not have.
	WrongDS
	// BadSig: the signatures over BreakName's records are corrupted.
	BadSig
	// NoSig: the signatures over BreakName's records are removed.
	NoSig
)

// Desc describes a lab: its servers, and the zones they serve.
type Desc struct {
	Servers []Server
	Zones   []Zone
}

// Lab is a running lab.
type Lab struct {
	// Dir holds the zone files, keys, configs and the servers' logs.
	Dir string
	// Net is the lab's /24 (127.53.N.0/24).
	Net netip.Prefix
	// Hints is the root hints in zone-file format (as named.root).
	Hints string
	// TrustAnchor is the root KSK's DS record (zone-file format), empty
	// when the root is unsigned.
	TrustAnchor string
	// RootKey is the root's DNSKEY RRset (zone-file format).
	RootKey string

	desc  Desc
	addrs map[string]netip.Addr
	t     TB
}

// TB is what a lab needs of its owner: *testing.T and *testing.B have it,
// and so does a benchmark program that runs a lab outside go test
// (bench/recursorlab). Fatal and Fatalf must not return; Cleanup
// functions run, last added first, when the owner is done with the lab.
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	TempDir() string
}

// StartWait bounds how long Start waits for every server to answer.
const StartWait = 15 * time.Second

// Addr returns the address of the server called name (a Server.Name, or
// "unbound" or "pdns" for a reference resolver's address); it fails the
// test for an unknown name.
func (l *Lab) Addr(name string) netip.Addr {
	a, ok := l.addrs[name]
	if !ok {
		l.t.Fatalf("dnslab: no server %q", name)
	}
	return a
}

// HintsFile writes the root hints to a file in the lab's directory and
// returns its path.
func (l *Lab) HintsFile() string {
	p := filepath.Join(l.Dir, "root.hints")
	if err := os.WriteFile(p, []byte(l.Hints), 0o644); err != nil {
		l.t.Fatal(err)
	}
	return p
}

// Need fails the test when an external program is missing, naming the
// Debian package that has it.
func Need(t TB, path, aptPackage string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err != nil {
		t.Fatalf("dnslab: %s not found (apt-get install -y %s): %v", path, aptPackage, err)
	}
	return p
}

// Start builds and starts the lab described by d; it ends with the test.
func Start(t TB, d Desc) *Lab {
	t.Helper()
	Need(t, "/usr/sbin/nsd", "nsd")
	for _, z := range d.Zones {
		if z.Signed {
			Need(t, "ldns-signzone", "ldnsutils")
			Need(t, "ldns-keygen", "ldnsutils")
			Need(t, "ldns-key2ds", "ldnsutils")
			break
		}
	}
	if err := d.check(); err != nil {
		t.Fatalf("dnslab: %v", err)
	}
	// Servers, plus one address for a reference resolver.
	n := len(d.Servers) + 1
	prefix := reserveNet(t, n)
	l := &Lab{Dir: t.TempDir(), Net: prefix, desc: d, addrs: map[string]netip.Addr{}, t: t}
	a := prefix.Addr().Next()
	for _, s := range d.Servers {
		l.addrs[s.Name] = a
		a = a.Next()
	}
	l.addrs["unbound"] = netip.AddrFrom4([4]byte{127, 53, prefix.Addr().As4()[2], 250})
	l.addrs["pdns"] = netip.AddrFrom4([4]byte{127, 53, prefix.Addr().As4()[2], 251})
	if err := l.build(); err != nil {
		t.Fatalf("dnslab: %v", err)
	}
	for _, s := range d.Servers {
		if s.Handler != nil {
			l.startGo(s)
		} else {
			l.startNSD(s)
		}
	}
	l.wait()
	return l
}

func (d Desc) check() error {
	names := map[string]bool{}
	for _, s := range d.Servers {
		if s.Name == "" || names[s.Name] || s.Name == "unbound" || s.Name == "pdns" {
			return fmt.Errorf("server name %q empty, reserved or repeated", s.Name)
		}
		names[s.Name] = true
		if s.Host != "" && !dns.IsFqdn(s.Host) {
			return fmt.Errorf("server %s: host %q is not a FQDN", s.Name, s.Host)
		}
	}
	if len(d.Servers) > 200 {
		return errors.New("more than 200 servers")
	}
	zones := map[string]bool{}
	for _, z := range d.Zones {
		if !dns.IsFqdn(z.Name) || zones[z.Name] {
			return fmt.Errorf("zone %q not a FQDN or repeated", z.Name)
		}
		zones[z.Name] = true
	}
	for _, s := range d.Servers {
		for _, z := range s.Zones {
			if !zones[z] && s.Handler == nil {
				return fmt.Errorf("server %s serves %q, which is not described", s.Name, z)
			}
		}
	}
	return nil
}

// reserveNet picks a free 127.53.N.0/24: locked against other labs (in this
// process or others) and with port 53 free on the addresses the lab uses.
func reserveNet(t TB, n int) netip.Prefix {
	t.Helper()
	for range 64 {
		third := byte(1 + rand.N(254))
		lock := filepath.Join(os.TempDir(), fmt.Sprintf("svcpf-dnslab-127.53.%d.lock", third))
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatalf("dnslab: %v", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		base := netip.AddrFrom4([4]byte{127, 53, third, 0})
		if !portsFree(base, n) {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() }) // closing drops the lock
		return netip.PrefixFrom(base, 24)
	}
	t.Fatal("dnslab: no free 127.53.N.0/24 after 64 tries")
	return netip.Prefix{}
}

func portsFree(base netip.Addr, n int) bool {
	check := func(a netip.Addr) bool {
		ap := netip.AddrPortFrom(a, 53).String()
		u, err := net.ListenPacket("udp4", ap)
		if err != nil {
			return false
		}
		u.Close()
		l, err := net.Listen("tcp4", ap)
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	a := base.Next()
	for range n {
		if !check(a) {
			return false
		}
		a = a.Next()
	}
	b := base.As4()
	// The reference resolvers' addresses: unbound's and pdns_recursor's.
	return check(netip.AddrFrom4([4]byte{b[0], b[1], b[2], 250})) && check(netip.AddrFrom4([4]byte{b[0], b[1], b[2], 251}))
}

// build writes every zone file (signing the signed ones, children first so
// that their DS records land in their parents), the root hints and the
// trust anchor.
func (l *Lab) build() error {
	zones := slices.Clone(l.desc.Zones)
	// Deepest first: a child is signed before its parent is written.
	slices.SortStableFunc(zones, func(a, b Zone) int { return dns.CountLabel(b.Name) - dns.CountLabel(a.Name) })
	extra := map[string][]string{} // zone → DS records its children add
	for _, z := range zones {
		text := l.expand(z)
		if ds := extra[z.Name]; len(ds) > 0 {
			text += "\n" + strings.Join(ds, "\n") + "\n"
		}
		file := filepath.Join(l.Dir, zoneFile(z.Name))
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			return err
		}
		// Check the text before nsd does: a typo shows here with its line.
		if err := checkZone(z.Name, text); err != nil {
			return fmt.Errorf("zone %s: %w", z.Name, err)
		}
		if !z.Signed {
			continue
		}
		ksk, ds, err := l.sign(z, file)
		if err != nil {
			return fmt.Errorf("signing %s: %w", z.Name, err)
		}
		if z.Name == "." {
			l.TrustAnchor = ds
			key, err := os.ReadFile(filepath.Join(l.Dir, ksk+".key"))
			if err != nil {
				return err
			}
			l.RootKey = string(key)
			continue
		}
		if z.NoDS {
			continue
		}
		if p := parentZone(z.Name, l.desc.Zones); p != "" {
			extra[p] = append(extra[p], ds)
		}
	}
	var hints strings.Builder
	for _, s := range l.desc.Servers {
		if !slices.Contains(s.Zones, ".") {
			continue
		}
		host := s.Host
		if host == "" {
			return fmt.Errorf("root server %s has no Host", s.Name)
		}
		fmt.Fprintf(&hints, ".\t3600000\tIN\tNS\t%s\n%s\t3600000\tIN\tA\t%s\n", host, host, l.addrs[s.Name])
	}
	if hints.Len() == 0 {
		return errors.New("no server serves the root zone")
	}
	l.Hints = hints.String()
	return nil
}

func (l *Lab) expand(z Zone) string {
	text := fmt.Sprintf("$ORIGIN %s\n$TTL 3600\n%s\n", z.Name, z.Records)
	for _, s := range l.desc.Servers {
		text = strings.ReplaceAll(text, "%"+s.Name+"%", l.addrs[s.Name].String())
	}
	return text
}

func checkZone(origin, text string) error {
	zp := dns.NewZoneParser(strings.NewReader(text), origin, "")
	for _, ok := zp.Next(); ok; _, ok = zp.Next() {
	}
	return zp.Err()
}

// parentZone is the closest enclosing zone of name among zones.
func parentZone(name string, zones []Zone) string {
	best, bestLabels := "", -1
	for _, z := range zones {
		if z.Name != name && dns.IsSubDomain(z.Name, name) && dns.CountLabel(z.Name) > bestLabels {
			best, bestLabels = z.Name, dns.CountLabel(z.Name)
		}
	}
	return best
}

func zoneFile(name string) string {
	if name == "." {
		return "root.zone"
	}
	return strings.TrimSuffix(name, ".") + ".zone"
}

// sign makes a KSK and a ZSK for z, signs file into file (replacing it) and
// returns the KSK's base file name and its DS record (SHA-256).
func (l *Lab) sign(z Zone, file string) (ksk, ds string, err error) {
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = l.Dir
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, ee.Stderr)
			}
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if ksk, err = run("ldns-keygen", "-a", "ECDSAP256SHA256", "-k", z.Name); err != nil {
		return "", "", err
	}
	zsk, err := run("ldns-keygen", "-a", "ECDSAP256SHA256", z.Name)
	if err != nil {
		return "", "", err
	}
	args := []string{"-f", file + ".signed"}
	switch z.Break {
	case Expired:
		args = append(args, "-i", "20200101", "-e", "20200201")
	case NotYetValid:
		args = append(args, "-i", "21000101", "-e", "21000201")
	}
	if z.NSEC3 {
		args = append(args, "-n", "-t", "0")
		if z.OptOut {
			args = append(args, "-p")
		}
	}
	args = append(args, file, ksk, zsk)
	if _, err := run("ldns-signzone", args...); err != nil {
		return "", "", err
	}
	if err := os.Rename(file+".signed", file); err != nil {
		return "", "", err
	}
	dsKey := ksk
	if z.Break == WrongDS {
		if dsKey, err = run("ldns-keygen", "-a", "ECDSAP256SHA256", "-k", z.Name); err != nil {
			return "", "", err
		}
	}
	if ds, err = run("ldns-key2ds", "-n", "-2", dsKey+".key"); err != nil {
		return "", "", err
	}
	if z.Break == BadSig || z.Break == NoSig {
		if err := damageSigs(file, z); err != nil {
			return "", "", err
		}
	}
	return ksk, ds, nil
}

// damageSigs rewrites a signed zone file with the RRSIGs over
// z.BreakName's records corrupted (BadSig: one byte of the signature
// flipped) or removed (NoSig).
func damageSigs(file string, z Zone) error {
	owner := dns.Fqdn(z.BreakName)
	if !strings.HasSuffix(z.BreakName, ".") {
		owner = z.BreakName + "." + z.Name
		if z.Name == "." {
			owner = z.BreakName + "."
		}
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	zp := dns.NewZoneParser(strings.NewReader(string(text)), z.Name, file)
	var out strings.Builder
	hit := 0
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if sig, isSig := rr.(*dns.RRSIG); isSig && strings.EqualFold(sig.Hdr.Name, owner) {
			hit++
			if z.Break == NoSig {
				continue
			}
			b := []byte(sig.Signature)
			// A base64 letter changed to another: still valid
			// base64, another signature.
			if b[0] == 'A' {
				b[0] = 'B'
			} else {
				b[0] = 'A'
			}
			sig.Signature = string(b)
		}
		out.WriteString(rr.String() + "\n")
	}
	if err := zp.Err(); err != nil {
		return err
	}
	if hit == 0 {
		return fmt.Errorf("zone %s: no RRSIG owned by %s to damage", z.Name, owner)
	}
	return os.WriteFile(file, []byte(out.String()), 0o644)
}

func (l *Lab) startNSD(s Server) {
	t := l.t
	dir := filepath.Join(l.Dir, "nsd-"+s.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, `server:
	ip-address: %s
	port: 53
	do-ip4: yes
	do-ip6: no
	username: ""
	chroot: ""
	zonesdir: %q
	database: ""
	zonelistfile: %q
	xfrdfile: %q
	xfrdir: %q
	pidfile: %q
	logfile: %q
	server-count: 1
	verbosity: 1
	hide-version: yes
	refuse-any: no
	# Response rate limiting would drop the benchmarks' and concurrent tests' queries.
	rrl-ratelimit: 0
	rrl-whitelist-ratelimit: 0
	reuseport: no
remote-control:
	control-enable: no
`, l.addrs[s.Name], l.Dir, filepath.Join(dir, "zone.list"), filepath.Join(dir, "xfrd.state"),
		dir, filepath.Join(dir, "nsd.pid"), filepath.Join(dir, "nsd.log"))
	for _, z := range s.Zones {
		fmt.Fprintf(&conf, "zone:\n\tname: %q\n\tzonefile: %q\n", z, zoneFile(z))
	}
	cf := filepath.Join(dir, "nsd.conf")
	if err := os.WriteFile(cf, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	l.startProcess("nsd "+s.Name, filepath.Join(dir, "nsd.log"), "/usr/sbin/nsd", "-d", "-c", cf)
}

// startProcess runs a server in the foreground and stops it (SIGTERM, then
// SIGKILL) when the test ends. Its stderr and log file are printed when the
// test fails, and also when it exits early.
func (l *Lab) startProcess(what, logFile, path string, args ...string) {
	t := l.t
	cmd := exec.Command(path, args...)
	var stderr strings.Builder
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("dnslab: starting %s: %v", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		log, _ := os.ReadFile(logFile)
		t.Fatalf("dnslab: %s exited at once: %v\n%s\n%s", what, err, stderr.String(), log)
	case <-time.After(50 * time.Millisecond):
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			log, _ := os.ReadFile(logFile)
			t.Logf("dnslab: %s output:\n%s\n%s", what, stderr.String(), log)
		}
	})
}

func (l *Lab) startGo(s Server) {
	t := l.t
	ap := netip.AddrPortFrom(l.addrs[s.Name], 53).String()
	pc, err := net.ListenPacket("udp4", ap)
	if err != nil {
		t.Fatalf("dnslab: %s: %v", s.Name, err)
	}
	ln, err := net.Listen("tcp4", ap)
	if err != nil {
		pc.Close()
		t.Fatalf("dnslab: %s: %v", s.Name, err)
	}
	us := &dns.Server{PacketConn: pc, Handler: s.Handler}
	ts := &dns.Server{Listener: ln, Handler: s.Handler}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	t.Cleanup(func() {
		_ = us.Shutdown()
		_ = ts.Shutdown()
	})
}

// wait returns once every nsd server answers: each zone's SOA with AA from
// its servers, or any answer from a server without zones.
func (l *Lab) wait() {
	t := l.t
	deadline := time.Now().Add(StartWait)
	for _, s := range l.desc.Servers {
		if s.Handler != nil {
			continue
		}
		addr := netip.AddrPortFrom(l.addrs[s.Name], 53)
		probes := s.Zones
		if len(probes) == 0 {
			probes = []string{"."}
		}
		for _, z := range probes {
			for {
				r, err := Query(context.Background(), addr, z, dns.TypeSOA, false)
				if err == nil && (len(s.Zones) == 0 || (r.Authoritative && r.Rcode == dns.RcodeSuccess)) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("dnslab: server %s (%s) does not answer for %s: %v %v", s.Name, addr, z, err, r)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

// Query sends one query (RD as asked, EDNS0 with DO) to addr over UDP,
// retrying over TCP when the answer is truncated; it waits at most 5 s.
func Query(ctx context.Context, addr netip.AddrPort, name string, qtype uint16, rd bool) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = rd
	m.SetEdns0(1232, true)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := &dns.Client{Net: "udp", UDPSize: 1232}
	r, _, err := c.ExchangeContext(ctx, m, addr.String())
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.ExchangeContext(ctx, m, addr.String())
	}
	return r, err
}
