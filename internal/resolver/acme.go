package resolver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// DefaultACMEDirectory is Let's Encrypt's production directory, used
// when dns.tls.acme.directory is empty.
const DefaultACMEDirectory = autocert.DefaultACMEDirectory

// acmeMaxRenewBefore is the largest renewal window autocert honours: it
// caps RenewBefore at 30 days.
const acmeMaxRenewBefore = 30 * 24 * time.Hour

// ACMEConfig obtains the encrypted listeners' certificate from an ACME
// certificate authority (dns.tls.acme) instead of files. The challenge
// answered is TLS-ALPN-01, on the DoT and DoH listeners themselves: the
// CA connects to port 443 of each domain, so one of them must listen on
// (or be forwarded from) port 443.
type ACMEConfig struct {
	// Domains are the names the certificate is for (domains); the first
	// is served to clients that send no server name, or one not listed.
	Domains []string
	// Email is the account's contact address (email); "": none.
	Email string
	// Directory is the CA's directory URL (directory); "":
	// DefaultACMEDirectory.
	Directory string
	// CacheDir keeps the account key and certificates across restarts
	// (cache_dir); required (the app defaults it to <data_dir>/acme).
	CacheDir string
	// CAFile is a PEM bundle of roots trusted for the CA's own HTTPS,
	// for a private CA (ca_file); "": the system roots.
	CAFile string
	// RenewBefore is how long before expiry a certificate is renewed
	// (renew_before); 0: a third of its validity, at most 30 days.
	RenewBefore time.Duration
}

// Validate sets the defaults and checks the config; errors name the key.
// New calls it; the app calls it to check a file before starting.
func (c *ACMEConfig) Validate() error {
	if len(c.Domains) == 0 {
		return errors.New("dns.tls.acme.domains: list at least one name the certificate is for")
	}
	for i, d := range c.Domains {
		if _, ok := validHostname(d); !ok {
			return fmt.Errorf("dns.tls.acme.domains[%d]: %q is not a host name (wildcards cannot be obtained with TLS-ALPN-01)", i, d)
		}
		c.Domains[i] = toLower(d)
	}
	if c.Directory == "" {
		c.Directory = DefaultACMEDirectory
	}
	if u, err := url.Parse(c.Directory); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("dns.tls.acme.directory: %q is not an http(s) URL", c.Directory)
	}
	if c.CacheDir == "" {
		return errors.New("dns.tls.acme.cache_dir: required (a directory kept across restarts for the account key and certificates)")
	}
	if c.RenewBefore < 0 {
		return fmt.Errorf("dns.tls.acme.renew_before: %s is negative", c.RenewBefore)
	}
	if c.RenewBefore > acmeMaxRenewBefore {
		return fmt.Errorf("dns.tls.acme.renew_before: %s is more than the 30 days the ACME client honours", c.RenewBefore)
	}
	return nil
}

// acmeStore serves certificates obtained and renewed by autocert. It
// answers TLS-ALPN-01 challenge handshakes too, so the listeners using
// it offer the acme-tls/1 protocol.
type acmeStore struct {
	m      *autocert.Manager
	def    string
	log    *slog.Logger
	closed *atomic.Bool

	// notAfter is the expiry (Unix seconds) of the certificate last
	// served; 0: none served yet. errors counts the handshakes autocert
	// had no certificate for; lastErr is the latest such error, cleared
	// by a success (for /health).
	notAfter atomic.Int64
	errors   atomic.Uint64
	lastErr  atomic.Pointer[string]
}

// errACMEClosed is what a renewal still scheduled by autocert meets once
// the resolver is closed: autocert has no way to stop its renewal
// timers, so the closed store refuses their requests and cache writes.
var errACMEClosed = errors.New("dns.tls.acme: the resolver is closed")

// closedGuard refuses the ACME client's requests once closed.
type closedGuard struct {
	next   http.RoundTripper
	closed *atomic.Bool
}

func (g closedGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if g.closed.Load() {
		return nil, errACMEClosed
	}
	return g.next.RoundTrip(req)
}

// guardedCache refuses cache writes once closed.
type guardedCache struct {
	autocert.Cache
	closed *atomic.Bool
}

func (c guardedCache) Put(ctx context.Context, key string, data []byte) error {
	if c.closed.Load() {
		return errACMEClosed
	}
	return c.Cache.Put(ctx, key, data)
}

func (s *acmeStore) close() { s.closed.Store(true) }

func newACMEStore(c *ACMEConfig, log *slog.Logger) (*acmeStore, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.CAFile != "" {
		b, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("dns.tls.acme.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("dns.tls.acme.ca_file %s: no PEM certificate in it (give the private CA's root certificate)", c.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	closed := new(atomic.Bool)
	hc := &http.Client{Transport: closedGuard{next: tr, closed: closed}, Timeout: time.Minute}
	if err := os.MkdirAll(c.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("dns.tls.acme.cache_dir: %w (give a writable directory)", err)
	}
	m := &autocert.Manager{
		Prompt:      autocert.AcceptTOS,
		Cache:       guardedCache{Cache: autocert.DirCache(c.CacheDir), closed: closed},
		HostPolicy:  autocert.HostWhitelist(c.Domains...),
		RenewBefore: c.RenewBefore,
		Email:       c.Email,
		Client:      &acme.Client{DirectoryURL: c.Directory, HTTPClient: hc},
	}
	return &acmeStore{m: m, def: c.Domains[0], log: log, closed: closed}, nil
}

// get is the listeners' tls.Config.GetCertificate. A client that sends
// no server name (it connected by address), or one the certificate is
// not for (a client id label), gets the first domain's certificate:
// autocert would refuse them. Challenge handshakes pass unchanged.
func (s *acmeStore) get(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if !slices.Contains(h.SupportedProtos, acme.ALPNProto) {
		if name := toLower(h.ServerName); name == "" || s.m.HostPolicy(h.Context(), name) != nil {
			h2 := *h
			h2.ServerName = s.def
			h = &h2
		}
	}
	c, err := s.m.GetCertificate(h)
	if err == nil && c != nil && c.Leaf != nil && h.ServerName == s.def {
		s.notAfter.Store(c.Leaf.NotAfter.Unix())
		s.lastErr.Store(nil)
	}
	if err != nil {
		if s.closed.Load() {
			return nil, err
		}
		msg := err.Error()
		s.errors.Add(1)
		s.lastErr.Store(&msg)
		s.log.Error("dns.tls.acme: no certificate to serve (check that the CA at dns.tls.acme.directory is reachable and "+
			"that port 443 of each of dns.tls.acme.domains reaches a DoT or DoH listener for the TLS-ALPN-01 challenge)",
			"server_name", h.ServerName, "err", err)
	}
	return c, err
}

// obtain asks for the first domain's certificate at start, so that the
// first client does not wait for the CA and /health knows at once when
// none can be had.
func (s *acmeStore) obtain() {
	// What a TLS 1.3 client offers: autocert then picks an ECDSA key.
	_, _ = s.get(&tls.ClientHelloInfo{ServerName: s.def, SupportedCurves: []tls.CurveID{tls.CurveP256},
		SignatureSchemes: []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256},
		CipherSuites:     []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}})
}

// problem is the /health line of a store with no usable certificate; nil
// when one is served and unexpired.
func (s *acmeStore) problem(now time.Time) error {
	na := s.notAfter.Load()
	if e := s.lastErr.Load(); e != nil && (na == 0 || now.Unix() >= na) {
		return fmt.Errorf("dns.tls.acme: no certificate for %s could be obtained, so DoT, DoH and DoQ handshakes fail (%s); it is retried a minute after each failure; "+
			"check that dns.tls.acme.directory is reachable and that port 443 of each of dns.tls.acme.domains reaches a DoT or DoH listener", s.def, *e)
	}
	if na != 0 && now.Unix() >= na {
		return fmt.Errorf("dns.tls.acme: the certificate for %s expired at %s and was not renewed; check the resolver's log for dns.tls.acme errors",
			s.def, time.Unix(na, 0).UTC().Format(time.RFC3339))
	}
	return nil
}
