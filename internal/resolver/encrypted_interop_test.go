package resolver_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// kdig is Knot DNS's client (Debian's knot-dnsutils): a DoT and DoH
// client written by others. Missing, the test fails and says how to
// install it (CI's .ci/run installs it): no skip.
func kdig(t *testing.T) string {
	t.Helper()
	return tool(t, "kdig", "knot-dnsutils")
}

func splitHostPort(t *testing.T, hp string) (string, string) {
	t.Helper()
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}

// runKdig runs kdig with args against e's CA, within bound.
func (e *encEnv) runKdig(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
	defer cancel()
	args = append([]string{"+tls-ca=" + e.ca.pemFile, "+tls-hostname=dns.example.test", "+time=3", "+retry=0"}, args...)
	out, err := exec.CommandContext(ctx, kdig(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kdig %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestKdigDoT: kdig +tls verifies our certificate against the test CA,
// sends a padded query, and gets the answer; its SNI carries a client id
// that reaches the observer.
func TestKdigDoT(t *testing.T) {
	rec := &recorder{}
	e := newEncEnv(t, func(c *resolver.Config) { c.Observer = rec })
	host, port := splitHostPort(t, e.dot)
	out := e.runKdig(t, "@"+host, "-p", port, "+tls", "+tls-sni=kid1.dns.example.test", "kdig.test", "A")
	if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "kdig.test.") || !strings.Contains(out, upstreamA.String()) {
		t.Fatalf("kdig +tls:\n%s", out)
	}
	if !strings.Contains(out, "PADDING") {
		t.Fatalf("kdig +tls: reply not padded:\n%s", out)
	}
	ev := rec.next(t, 0)
	if ev.ClientID != "kid1" || ev.Transport.String() != "dot" {
		t.Fatalf("observer: client id %q over %s", ev.ClientID, ev.Transport)
	}
}

// TestKdigDoH: kdig +https, POST and GET, on /dns-query/{client_id}.
func TestKdigDoH(t *testing.T) {
	rec := &recorder{}
	e := newEncEnv(t, func(c *resolver.Config) { c.Observer = rec })
	host, port := splitHostPort(t, e.doh)
	for i, get := range []bool{false, true} {
		args := []string{"@" + host, "-p", port, "+https=/dns-query/kid2", "kdigh.test", "A"}
		if get {
			args = append(args, "+https-get")
		}
		out := e.runKdig(t, args...)
		if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "kdigh.test.") {
			t.Fatalf("kdig %v:\n%s", args, out)
		}
		ev := rec.next(t, i)
		if ev.ClientID != "kid2" || ev.Transport.String() != "doh" {
			t.Fatalf("observer: client id %q over %s", ev.ClientID, ev.Transport)
		}
	}
}

// tool finds an external client, failing (never skipping) with how to
// install it when missing.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (%v): apt-get install -y %s, as .ci/run does", name, err, pkg)
	}
	return p
}

// TestCurlDoH: curl --http2 (libcurl over nghttp2), GET and POST, gets
// padded answers over HTTP/2.
func TestCurlDoH(t *testing.T) {
	e := newEncEnv(t, nil)
	_, port := splitHostPort(t, e.doh)
	dir := t.TempDir()
	q := mustPack(t, query("curl.test", dns.TypeA, 1232, false))
	qf := filepath.Join(dir, "q")
	writeFile(t, qf, q)
	for _, get := range []bool{true, false} {
		out := filepath.Join(dir, "a")
		args := []string{"--http2", "-sS", "--max-time", "5", "--cacert", e.ca.pemFile,
			"--resolve", "dns.example.test:" + port + ":127.0.0.1", "-o", out, "-w", "%{http_version} %{http_code} %{content_type}"}
		u := "https://dns.example.test:" + port + "/dns-query"
		if get {
			args = append(args, u+"?dns="+base64.RawURLEncoding.EncodeToString(q))
		} else {
			args = append(args, "-H", "Content-Type: application/dns-message", "--data-binary", "@"+qf, u)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
		got, err := exec.CommandContext(ctx, tool(t, "curl", "curl"), args...).CombinedOutput()
		cancel()
		if err != nil || string(got) != "2 200 application/dns-message" {
			t.Fatalf("curl %v: %v %q", args, err, got)
		}
		body, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		r := mustUnpack(t, body)
		if len(body)%468 != 0 || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Question[0].Name != "curl.test." {
			t.Fatalf("curl (get %v): %d bytes, %v", get, len(body), r)
		}
	}
}

// TestH2loadDoH: h2load (nghttp2) sends 600 GETs over 3 connections, 20
// streams at a time each: every one answered 200.
func TestH2loadDoH(t *testing.T) {
	e := newEncEnv(t, nil)
	dir := t.TempDir()
	var uris strings.Builder
	for i := range 40 {
		m := query(fmt.Sprintf("h%d.test", i), dns.TypeA, 0, false)
		m.Id = 0
		fmt.Fprintf(&uris, "https://%s/dns-query?dns=%s\n", e.doh, base64.RawURLEncoding.EncodeToString(mustPack(t, m)))
	}
	f := filepath.Join(dir, "uris")
	writeFile(t, f, []byte(uris.String()))
	ctx, cancel := context.WithTimeout(context.Background(), 4*bound)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool(t, "h2load", "nghttp2-client"), "-n", "600", "-c", "3", "-m", "20", "-i", f).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "600 succeeded, 0 failed, 0 errored") ||
		!strings.Contains(string(out), "status codes: 600 2xx") || !strings.Contains(string(out), "h2") {
		t.Fatalf("h2load: %v\n%s", err, out)
	}
}
