package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/activity/reports"
	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// metricValue is the value of one series in a /metrics body ("" when
// absent).
func metricValue(body, series string) string {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestResolverUnready: `svc-pf resolver` started while its NATS server is
// down cannot load its sessions and settings. With resolver.unready open
// it answers a name its global settings will block from the forwarders,
// counts it in svcpf_resolver_unfiltered_total{reason="sessions"}, and its
// /health says it answers unfiltered, what it waits for and what to
// check; with closed it answers SERVFAIL with EDE 14 (as dig shows too),
// counted in svcpf_resolver_unready_servfail_total. Once NATS is up with
// the buckets, the name is blocked, the line leaves /health, nothing more
// is counted, and when NATS goes away again the answers stay filtered.
func TestResolverUnready(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) { testResolverUnready(t, mode) })
	}
}

func testResolverUnready(t *testing.T, mode string) {
	ports := freePorts(t, 3)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", ports[0])
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	cfg := testResolverConfig(t, ports)
	cfg.Unready = mode
	runResolver(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	line := "resolver answering unfiltered (resolver.unready: open)"
	counter := `svcpf_resolver_unfiltered_total{reason="sessions"}`
	if mode == "closed" {
		line = "resolver answering SERVFAIL, EDE 14 Not Ready (resolver.unready: closed)"
		counter = `svcpf_resolver_unready_servfail_total{reason="sessions"}`
	}
	natstest.Eventually(t, "/health stating the unready answers", func() (bool, string) {
		code, body := httpGet(t, base+"/health")
		return code == http.StatusServiceUnavailable && strings.Contains(body, line) &&
			strings.Contains(body, "waiting for the sessions bucket, the settings bucket") &&
			strings.Contains(body, "check that NATS is reachable and the IP Mapper has created the sessions bucket") &&
			strings.Contains(body, "waiting for NATS at "+natsURL), body
	})

	m := dnsFrom(t, "127.0.0.1", dnsAddr, "bad.test", dns.TypeA, dns.ClassINET)
	switch mode {
	case "open":
		if m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || !strings.Contains(m.Answer[0].String(), upstreamAnswer.String()) {
			t.Fatalf("open while unready: want the forwarder's answer, got %v", m)
		}
	case "closed":
		e, ok := ede(m)
		if m == nil || m.Rcode != dns.RcodeServerFailure || !ok || e.InfoCode != dns.ExtendedErrorCodeNotReady {
			t.Fatalf("closed while unready: want SERVFAIL with EDE 14, got %v", m)
		}
		if dig, err := exec.LookPath("dig"); err == nil {
			host, port, _ := net.SplitHostPort(dnsAddr)
			out, err := exec.CommandContext(ctx, dig, "+tries=1", "+time=3", "@"+host, "-p", port, "bad.test", "A").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "status: SERVFAIL") || !strings.Contains(string(out), "EDE: 14") {
				t.Fatalf("dig while unready (%v):\n%s", err, out)
			}
		} else {
			t.Log("dig not installed: the miekg/dns client's check above stands alone")
		}
	}
	_, metrics := httpGet(t, base+"/metrics")
	unready := metricValue(metrics, counter)
	if unready == "" || unready == "0" {
		t.Fatalf("%s not counted: %q", counter, unready)
	}

	// NATS comes up with the buckets; the global settings block bad.test.
	srv, nc, js := startNATSOn(t, ports[0])
	natstest.CreateBucket(t, js, session.Bucket)
	natstest.Put(t, natstest.CreateBucket(t, js, settings.Bucket), settings.GlobalKey, []byte(`{"blocklist":["bad.test"]}`))

	body := waitHealth(t, base, http.StatusOK, 30*time.Second)
	if strings.Contains(body, "unready") {
		t.Fatalf("/health still states the unready answers: %s", body)
	}
	blocked := func(when string) {
		t.Helper()
		var m *dns.Msg
		natstest.Eventually(t, "bad.test blocked "+when, func() (bool, string) {
			m = dnsFrom(t, "127.0.0.1", dnsAddr, "bad.test", dns.TypeA, dns.ClassINET)
			if m == nil {
				return false, "no answer"
			}
			e, ok := ede(m)
			return m.Rcode != dns.RcodeServerFailure && ok && e.InfoCode != dns.ExtendedErrorCodeNotReady &&
				!strings.Contains(fmt.Sprint(m.Answer), upstreamAnswer.String()), m.String()
		})
		if ok := dnsFrom(t, "127.0.0.1", dnsAddr, "good.test", dns.TypeA, dns.ClassINET); ok == nil || ok.Rcode != dns.RcodeSuccess {
			t.Fatalf("good.test %s: %v", when, ok)
		}
	}
	blocked("once ready")
	_, metrics = httpGet(t, base+"/metrics")
	if got := metricValue(metrics, counter); got != unready {
		t.Fatalf("%s moved once ready: %s → %s", counter, unready, got)
	}

	// NATS goes away: the read models keep their data, the resolver stays
	// ready and filtering.
	nc.Close()
	srv.Shutdown()
	blocked("after NATS went away")
	if code, body := httpGet(t, base+"/health"); strings.Contains(body, "resolver answering") {
		t.Fatalf("/health after NATS went away: %d %s", code, body)
	}
	_, metrics = httpGet(t, base+"/metrics")
	if got := metricValue(metrics, counter); got != unready {
		t.Fatalf("%s moved after NATS went away: %s → %s", counter, unready, got)
	}
}

// TestResolverUnreadyKey: resolver.unready is read from `svc-pf
// resolver`'s file and from `svc-pf all`'s resolver section; open and
// closed (and nothing: open) pass, anything else is refused naming the
// key and the values it takes.
func TestResolverUnreadyKey(t *testing.T) {
	for _, tt := range []struct{ yaml, err string }{
		{"", ""}, {"unready: open\n", ""}, {"unready: closed\n", ""},
		{"unready: half\n", `unready: "half" is neither open nor closed`},
	} {
		res := DefaultResolverConfig()
		res.Forwarders = []string{"127.0.0.1:53"}
		if err := config.Decode([]byte(tt.yaml), &res); err != nil {
			t.Fatalf("%q: %v", tt.yaml, err)
		}
		_, err := res.parse()
		all := DefaultAllConfig()
		all.Resolver.Forwarders = []string{"127.0.0.1:53"}
		if derr := config.Decode([]byte("resolver:\n"+indent(tt.yaml)), &all); derr != nil {
			t.Fatalf("all %q: %v", tt.yaml, derr)
		}
		allErr := all.Validate()
		if tt.err == "" {
			if err != nil || allErr != nil {
				t.Errorf("%q: resolver %v, all %v", tt.yaml, err, allErr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("resolver %q: %v, want %q", tt.yaml, err, tt.err)
		}
		if allErr == nil || !strings.Contains(allErr.Error(), "resolver: "+tt.err) {
			t.Errorf("all %q: %v, want %q", tt.yaml, allErr, "resolver: "+tt.err)
		}
	}
}

func indent(s string) string {
	if s == "" {
		return "  {}\n"
	}
	return "  " + s
}

// TestUnreadyReasonReported: the reason the resolver gives an answer made
// before its data had loaded is one the activity reports filter by.
func TestUnreadyReasonReported(t *testing.T) {
	if !slices.Contains(reports.Reasons, string(resolver.ReasonUnready)) {
		t.Fatalf("reports.Reasons %v lacks %q", reports.Reasons, resolver.ReasonUnready)
	}
}
