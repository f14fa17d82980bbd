package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/dnslab"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// adFlag matches dig's header line when the AD bit is set.
var adFlag = regexp.MustCompile(`;; flags:[a-z ]* ad[ ;]`)

// TestResolverRecursiveDNSSEC runs `svc-pf resolver` with mode: recursive
// and dnssec: validate on a lab of nsd servers (root hints and trust anchor
// files written from the lab) and asks it with dig +dnssec: a secure name
// comes with AD and its RRSIGs, bogus names are SERVFAIL with the
// validator's extended error, an insecure name has no AD, a cache hit
// keeps the AD bit, and the subscriber's policy still blocks a name the
// recursor would answer.
func TestResolverRecursiveDNSSEC(t *testing.T) {
	dig := dnslab.Need(t, "dig", "bind9-dnsutils")
	lab := dnslab.Start(t, dnslab.Standard())
	dir := t.TempDir()
	anchors := filepath.Join(dir, "anchors")
	writeFile(t, anchors, lab.TrustAnchor+"\n")

	ports := freePorts(t, 3)
	_, _, js := startNATSOn(t, ports[0])
	natstest.CreateBucket(t, js, session.Bucket)
	natstest.Put(t, natstest.CreateBucket(t, js, settings.Bucket), settings.GlobalKey, []byte(`{"blocklist":["www.example"]}`))
	cfg := testResolverConfig(t, ports)
	cfg.Forwarders = nil
	cfg.Mode, cfg.DNSSEC = "recursive", "validate"
	cfg.RootHintsFile, cfg.TrustAnchorsFile = lab.HintsFile(), anchors
	cfg.queryLoopback = true // the lab's servers are on 127.53.N.x
	// A failed server stays throttled for the whole test, however slowly
	// a loaded machine runs dig (the failure statistics count it).
	cfg.throttleBase = time.Minute
	runResolver(t, cfg)
	if body := waitHealth(t, fmt.Sprintf("http://127.0.0.1:%d", ports[1]), 200, 30*time.Second); !strings.Contains(body, `"mode":"recursive"`) ||
		strings.Contains(body, "forwarder") {
		t.Fatalf("/health in recursive mode: want mode recursive and no forwarders: %s", body)
	}

	ask := digAt(t, dig, cfg.DNS.Listen[0])

	for range 2 { // the second time from the caches
		out := ask("www.secure.test.", "A", "+dnssec")
		if !strings.Contains(out, "status: NOERROR") || !adFlag.MatchString(out) || !strings.Contains(out, "RRSIG") {
			t.Fatalf("secure name: want NOERROR, AD and RRSIGs:\n%s", out)
		}
	}
	// A client asking with AD but without DO gets AD (RFC 6840), no RRSIG.
	if out := ask("www.sub.secure.test.", "A", "+adflag", "+nodnssec"); !adFlag.MatchString(out) || strings.Contains(out, "RRSIG") {
		t.Fatalf("secure name asked with AD: want AD, no RRSIG:\n%s", out)
	}
	for name, code := range map[string]uint16{
		"www.expired.test.": dns.ExtendedErrorCodeSignatureExpired,
		"www.wrongds.test.": dns.ExtendedErrorCodeDNSKEYMissing,
		"www.badsig.test.":  dns.ExtendedErrorCodeDNSBogus,
		"www.nosig.test.":   dns.ExtendedErrorCodeRRSIGsMissing,
	} {
		for range 2 {
			out := ask(name, "A", "+dnssec")
			if !strings.Contains(out, "status: SERVFAIL") || !strings.Contains(out, fmt.Sprintf("EDE: %d ", code)) {
				t.Fatalf("bogus %s: want SERVFAIL with EDE %d:\n%s", name, code, out)
			}
		}
	}
	for range 2 {
		out := ask("www.insecure.test.", "A", "+dnssec")
		if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "ANSWER: 1") || adFlag.MatchString(out) {
			t.Fatalf("insecure name: want NOERROR, an answer, no AD:\n%s", out)
		}
	}
	// Without DO nor AD: no AD bit even on a secure name, no RRSIG.
	if out := ask("www.secure.test.", "A", "+noadflag"); adFlag.MatchString(out) || strings.Contains(out, "RRSIG") {
		t.Fatalf("secure name without DO or AD: want neither AD nor RRSIG:\n%s", out)
	}
	// The policy decides on the recursor's answer as on a forwarder's.
	ub := lab.StartUnbound(dnslab.UnboundOptions{})
	ref, err := dnslab.Query(context.Background(), ub, "www.example.", dns.TypeA, true)
	if err != nil || len(ref.Answer) == 0 {
		t.Fatalf("unbound's www.example.: %v %v", ref, err)
	}
	labAddr := ref.Answer[len(ref.Answer)-1].(*dns.A).A.String()
	if out := ask("www.example.", "A"); strings.Contains(out, labAddr) {
		t.Fatalf("www.example. is blocked by the global settings but answered with the lab's %s:\n%s", labAddr, out)
	}
	if out := ask("www.test.", "A"); !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "ANSWER: 1") {
		t.Fatalf("an allowed name: %s", out)
	}

	// The statistics API serves the recursor's counters under PowerDNS's names.
	got := statistics(t, ports[1])
	for _, name := range []string{"dnssec-validations", "dnssec-result-secure", "dnssec-result-insecure", "dnssec-result-bogus", "nsspeeds-entries"} {
		if v := got[name]; v == "" || v == "0" {
			t.Errorf("statistic %s = %q, want it counted", name, v)
		}
	}
	if v, _ := strconv.Atoi(got["dnssec-result-bogus"]); v < 4 {
		t.Errorf("dnssec-result-bogus %d, want at least the 4 bogus names", v)
	}
}

// startLabResolver runs `svc-pf resolver` in recursive mode with the given
// dnssec mode on lab, and returns a dig against it and a reader of its
// statistics API.
func startLabResolver(t *testing.T, lab *dnslab.Lab, dnssecMode string) (func(name, qtype string, flags ...string) string, func() map[string]string) {
	t.Helper()
	dig := dnslab.Need(t, "dig", "bind9-dnsutils")
	anchors := filepath.Join(t.TempDir(), "anchors")
	writeFile(t, anchors, lab.TrustAnchor+"\n")
	ports := freePorts(t, 3)
	_, _, js := startNATSOn(t, ports[0])
	natstest.CreateBucket(t, js, session.Bucket)
	natstest.CreateBucket(t, js, settings.Bucket)
	cfg := testResolverConfig(t, ports)
	cfg.Forwarders = nil
	cfg.Mode, cfg.DNSSEC = "recursive", dnssecMode
	cfg.RootHintsFile, cfg.TrustAnchorsFile = lab.HintsFile(), anchors
	cfg.queryLoopback = true // the lab's servers are on 127.53.N.x
	runResolver(t, cfg)
	waitHealth(t, fmt.Sprintf("http://127.0.0.1:%d", ports[1]), 200, 30*time.Second)
	return digAt(t, dig, cfg.DNS.Listen[0]), func() map[string]string { return statistics(t, ports[1]) }
}

// digAt returns a dig against the resolver listening on listen (ip:port):
// one try, 10 s, its whole output.
func digAt(t *testing.T, dig, listen string) func(name, qtype string, flags ...string) string {
	host, port, _ := net.SplitHostPort(listen)
	return func(name, qtype string, flags ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		args := append([]string{"+tries=1", "+time=10", "@" + host, "-p", port, name, qtype}, flags...)
		out, err := exec.CommandContext(ctx, dig, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %s %s %v: %v\n%s", name, qtype, flags, err, out)
		}
		return string(out)
	}
}

// statistics reads the whole statistics API of the resolver whose HTTP
// listener is on port.
func statistics(t *testing.T, port int) map[string]string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/api/v1/servers/localhost/statistics", port), nil)
	req.Header.Set("X-API-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var items []struct{ Name, Value string }
	if err := json.NewDecoder(resp.Body).Decode(&items); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range items {
		got[it.Name] = it.Value
	}
	return got
}

// TestResolverRecursiveFailureStatistics runs `svc-pf resolver` in
// recursive mode on a lab with a server that never answers and reads the
// statistics its failures move through the statistics API:
// failed-host-entries and throttle-entries (the silent server),
// nsset-invalidations (the zones nothing answers for), throttled-out and
// throttled-outqueries (the silent server left unasked beside a lame one),
// dont-outqueries (a delegation to a private address).
func TestResolverRecursiveFailureStatistics(t *testing.T) {
	lab := dnslab.Start(t, dnslab.WithSilentServer(dnslab.Standard()))
	ask, stats := startLabResolver(t, lab, "process")
	before := stats()
	for _, name := range []string{"failed-host-entries", "throttle-entries", "nsset-invalidations", "throttled-out", "throttled-outqueries", "dont-outqueries"} {
		if before[name] != "0" {
			t.Fatalf("%s = %q before any query", name, before[name])
		}
	}
	for _, q := range []struct{ name, status string }{
		{"www.dead.test.", "SERVFAIL"},
		// Twice: the dropped NS set is asked of the parent again.
		{"mail.dead.test.", "SERVFAIL"},
		{"www.halfdead.test.", "NOERROR"},
		{"www.lamedead.test.", "SERVFAIL"},
		// Delegated to 10.53.0.1, which the default dont_query bars.
		{"www.private.test.", "SERVFAIL"},
	} {
		if out := ask(q.name, "A"); !strings.Contains(out, "status: "+q.status) {
			t.Fatalf("%s: want %s:\n%s", q.name, q.status, out)
		}
	}
	got := stats()
	for name, want := range map[string]string{
		"failed-host-entries":  "1",
		"throttle-entries":     "1",
		"nsset-invalidations":  "3",
		"throttled-out":        "1",
		"throttled-outqueries": "1",
		"dont-outqueries":      "1",
	} {
		if got[name] != want {
			t.Errorf("%s = %q, want %s", name, got[name], want)
		}
	}
}

// cdFlag matches dig's header line when the CD bit is set.
var cdFlag = regexp.MustCompile(`;; flags:[a-z ]* cd[ ;]`)

// TestResolverRecursiveCDAD runs `svc-pf resolver` in recursive mode on the
// lab and asks it with dig +cd, +adflag and +dnssec, each question twice
// or more so that the caches answer too: a client setting CD gets a bogus
// name's data without AD while others keep getting SERVFAIL; in process
// mode an AD-only client's answer is validated even when a client with
// neither DO nor AD asked first (and the other way round), so a cached
// unvalidated answer never reaches it.
func TestResolverRecursiveCDAD(t *testing.T) {
	lab := dnslab.Start(t, dnslab.Standard())
	status := func(out string) string {
		m := regexp.MustCompile(`status: ([A-Z]+)`).FindStringSubmatch(out)
		if m == nil {
			return "?"
		}
		return m[1]
	}
	type want struct {
		status string
		ad, cd bool
		data   string // an address the answer must hold, "" for none
	}
	check := func(t *testing.T, ask func(string, string, ...string) string, name string, flags []string, w want) {
		t.Helper()
		out := ask(name, "A", flags...)
		if status(out) != w.status || adFlag.MatchString(out) != w.ad || cdFlag.MatchString(out) != w.cd ||
			w.data != "" && !strings.Contains(out, w.data+"\n") {
			t.Errorf("%s %v: want %s AD=%v CD=%v %q:\n%s", name, flags, w.status, w.ad, w.cd, w.data, out)
		}
		if w.data == "" && strings.Contains(out, "ANSWER: 1") {
			t.Errorf("%s %v: an answer where none is due:\n%s", name, flags, out)
		}
	}
	t.Run("validate", func(t *testing.T) {
		ask, _ := startLabResolver(t, lab, "validate")
		for range 2 {
			for _, name := range []string{"www.badsig.test.", "www.expired.test."} {
				check(t, ask, name, []string{"+cd", "+dnssec"}, want{"NOERROR", false, true, "192.0.2.80"})
				check(t, ask, name, []string{"+cd", "+nodnssec", "+noadflag"}, want{"NOERROR", false, true, "192.0.2.80"})
				check(t, ask, name, []string{"+dnssec"}, want{"SERVFAIL", false, false, ""})
				check(t, ask, name, []string{"+nodnssec", "+noadflag"}, want{"SERVFAIL", false, false, ""})
			}
			// Secure data with CD keeps AD for a client asking for it.
			check(t, ask, "www.secure.test.", []string{"+cd", "+dnssec"}, want{"NOERROR", true, true, "192.0.2.10"})
			check(t, ask, "www.secure.test.", []string{"+cd", "+nodnssec", "+noadflag"}, want{"NOERROR", false, true, "192.0.2.10"})
		}
		if out := ask("www.badsig.test.", "A", "+cd", "+dnssec"); !strings.Contains(out, "RRSIG") {
			t.Errorf("bogus data for a DO client with CD without its RRSIGs:\n%s", out)
		}
	})
	t.Run("process", func(t *testing.T) {
		ask, _ := startLabResolver(t, lab, "process")
		// Unvalidated first (neither DO nor AD), then an AD-only client:
		// validated, AD; and the bogus name SERVFAIL for it.
		for range 2 {
			check(t, ask, "www.secure.test.", []string{"+nodnssec", "+noadflag"}, want{"NOERROR", false, false, "192.0.2.10"})
			check(t, ask, "www.expired.test.", []string{"+nodnssec", "+noadflag"}, want{"NOERROR", false, false, "192.0.2.80"})
		}
		for range 2 {
			check(t, ask, "www.secure.test.", []string{"+nodnssec", "+adflag"}, want{"NOERROR", true, false, "192.0.2.10"})
			check(t, ask, "www.expired.test.", []string{"+nodnssec", "+adflag"}, want{"SERVFAIL", false, false, ""})
		}
		// AD-only first, then a client with neither: no AD for it.
		for range 2 {
			check(t, ask, "www.sub.secure.test.", []string{"+nodnssec", "+adflag"}, want{"NOERROR", true, false, "192.0.2.60"})
		}
		for range 2 {
			check(t, ask, "www.sub.secure.test.", []string{"+nodnssec", "+noadflag"}, want{"NOERROR", false, false, "192.0.2.60"})
		}
		// CD with AD: validated, bogus data given without AD.
		for range 2 {
			check(t, ask, "www.nosig.test.", []string{"+nodnssec", "+adflag", "+cd"}, want{"NOERROR", false, true, "192.0.2.80"})
			check(t, ask, "www.nosig.test.", []string{"+nodnssec", "+adflag"}, want{"SERVFAIL", false, false, ""})
		}
	})
}
