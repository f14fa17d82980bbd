package resolver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// EncryptedConfig configures DNS over TLS (RFC 7858, tcp.go under TLS),
// DNS over HTTPS (RFC 8484, doh.go) and DNS over QUIC (RFC 9250, doq.go).
// Each is off while its list is empty.
type EncryptedConfig struct {
	// DoT, DoH and DoQ are the addresses served (dns.dot, dns.doh,
	// dns.doq: UDP).
	DoT, DoH, DoQ []netip.AddrPort
	// DoH3 are the addresses DoH is served on over HTTP/3 (dns.doh3:
	// UDP; doh3.go).
	DoH3 []netip.AddrPort
	// CertFile and KeyFile are the PEM certificate chain and key both
	// serve (dns.tls.cert_file, key_file); required with a listener.
	// Reloaded when the files change (tlscert.go). Exclusive with ACME.
	CertFile, KeyFile string
	// ACME obtains the certificate from an ACME CA instead (dns.tls.acme,
	// acme.go); nil: the files.
	ACME *ACMEConfig
	// Name is the resolver's name in its DDR answer (dns.tls.name): the
	// name the certificate is valid for; "": the certificate's first DNS
	// name that is not a wildcard (ddr.go).
	Name string
	// ClientIDSuffix: a TLS server name one label below it carries a
	// client id in that label (dns.tls.client_id_suffix); "": none.
	ClientIDSuffix string
	// MaxConnectionsPerClient bounds the open connections of one source
	// address on each listener (default 32); one more is closed at once.
	MaxConnectionsPerClient int
	// MaxQueriesPerConnection bounds the queries of one DoT connection,
	// and the streams of one HTTP/2 connection, answered at once
	// (default 100).
	MaxQueriesPerConnection int
	// IdleTimeout closes a connection idle this long (default 30s).
	IdleTimeout time.Duration
	// HandshakeTimeout bounds a connection's TLS handshake, from accept
	// (dns.tls.handshake_timeout, default 10s; tlshandshake.go); for DoQ
	// it is quic-go's HandshakeIdleTimeout (no packet for that long, or
	// no completed handshake in twice that long).
	HandshakeTimeout time.Duration
}

// Defaults of EncryptedConfig. A home router may put a household behind
// one address, each device with a connection or two: 32 connections.
// 100 queries per connection is the concurrent streams HTTP/2 servers
// commonly allow; browsers keep one connection and many streams. 30 s
// idle lets a browser keep its connection between page loads without
// holding idle ones for long.
const (
	DefaultEncryptedMaxConnectionsPerClient = 32
	DefaultEncryptedMaxQueriesPerConnection = 100
	DefaultEncryptedIdleTimeout             = 30 * time.Second
)

func (c *EncryptedConfig) enabled() bool { return len(c.DoT)+len(c.DoH)+len(c.DoQ)+len(c.DoH3) > 0 }

// validate sets the defaults and checks the config; errors name the key.
func (c *EncryptedConfig) validate() error {
	if c.MaxConnectionsPerClient < 0 {
		return fmt.Errorf("dns.tls.max_connections_per_client: %d is negative", c.MaxConnectionsPerClient)
	}
	if c.MaxQueriesPerConnection < 0 {
		return fmt.Errorf("dns.tls.max_queries_per_connection: %d is negative", c.MaxQueriesPerConnection)
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("dns.tls.idle_timeout: %s is negative", c.IdleTimeout)
	}
	if c.HandshakeTimeout < 0 {
		return fmt.Errorf("dns.tls.handshake_timeout: %s is negative", c.HandshakeTimeout)
	}
	if c.MaxConnectionsPerClient == 0 {
		c.MaxConnectionsPerClient = DefaultEncryptedMaxConnectionsPerClient
	}
	if c.MaxQueriesPerConnection == 0 {
		c.MaxQueriesPerConnection = DefaultEncryptedMaxQueriesPerConnection
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultEncryptedIdleTimeout
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultEncryptedHandshakeTimeout
	}
	if c.ClientIDSuffix != "" {
		s := c.ClientIDSuffix
		if s[len(s)-1] == '.' {
			s = s[:len(s)-1]
		}
		if _, ok := validHostname(s); !ok {
			return fmt.Errorf("dns.tls.client_id_suffix: %q is not a host name", c.ClientIDSuffix)
		}
		c.ClientIDSuffix = toLower(s)
	}
	if c.Name != "" {
		if _, ok := validHostname(strings.TrimSuffix(c.Name, ".")); !ok {
			return fmt.Errorf("dns.tls.name: %q is not a host name", c.Name)
		}
	}
	if !c.enabled() {
		return nil
	}
	if c.ACME != nil {
		if c.CertFile != "" || c.KeyFile != "" {
			return errors.New("dns.tls.acme and dns.tls.cert_file / key_file exclude each other: keep one way of getting the certificate")
		}
		return c.ACME.Validate()
	}
	if c.CertFile == "" || c.KeyFile == "" {
		return errors.New("dns.tls.cert_file and dns.tls.key_file (or dns.tls.acme) are required when dns.dot, dns.doh, dns.doq or dns.doh3 lists an address")
	}
	return nil
}

// validHostname checks a dotted name of valid labels.
func validHostname(s string) (string, bool) {
	if s == "" || len(s) > 253 {
		return "", false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if _, ok := validClientID(s[start:i]); !ok {
				return "", false
			}
			start = i + 1
		}
	}
	return s, true
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// getCertFunc is a tls.Config.GetCertificate: the certificate files'
// store or the ACME one.
type getCertFunc func(*tls.ClientHelloInfo) (*tls.Certificate, error)

// encryptedStreamOpt is what the encrypted listeners share: the TLS
// config (the certificate store's) and where client ids come from.
type encryptedStreamOpt struct {
	tls    *tls.Config
	suffix string
}

// clientIDOf is the client id of a DoT connection's server name, once
// its handshake is done ("": none).
func (o *encryptedStreamOpt) clientIDOf(c net.Conn) string {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return ""
	}
	return clientIDFromSNI(tc.ConnectionState().ServerName, o.suffix)
}

// listenEncrypted binds dns.dot and dns.doh.
func (r *Resolver) listenEncrypted() error {
	c := &r.cfg.Encrypted
	if !c.enabled() {
		return nil
	}
	var certs getCertFunc
	var extraProtos []string
	var files *certStore
	if c.ACME != nil {
		s, err := newACMEStore(c.ACME, r.log)
		if err != nil {
			return err
		}
		// The TLS-ALPN-01 challenge arrives on these listeners.
		r.acme, certs, extraProtos = s, s.get, []string{acme.ALPNProto}
	} else {
		s, err := newCertStore(c.CertFile, c.KeyFile, r.log)
		if err != nil {
			return err
		}
		files, certs = s, s.get
	}
	doqHandshakes := new(handshakeCounts)  // all DoQ listeners'
	doh3Handshakes := new(handshakeCounts) // all DoH3 listeners'
	if r.cfg.Registerer != nil {
		if err := r.cfg.Registerer.Register(newTLSCollector(files, r.acme, &r.dotHandshakes, &r.dohHandshakes, doqHandshakes, doh3Handshakes)); err != nil {
			return fmt.Errorf("resolver: registering the TLS certificate metrics: %w", err)
		}
	}
	for _, ap := range c.DoT {
		cfg := &tls.Config{GetCertificate: certs, MinVersion: tls.VersionTLS12, NextProtos: append([]string{"dot"}, extraProtos...)}
		opt := &encryptedStreamOpt{tls: cfg, suffix: c.ClientIDSuffix}
		ln, shard, bound, err := r.listenStream("dns.dot", ap)
		if err != nil {
			return err
		}
		t := newTCPServer(r, bound, newHandshakeListener(ln, cfg, c.HandshakeTimeout, &r.dotHandshakes), shard)
		t.transport, t.idle, t.perConn, t.tls = policy.TransportDoT, c.IdleTimeout, c.MaxQueriesPerConnection, opt
		r.dot = append(r.dot, t)
	}
	for _, ap := range c.DoH {
		ln, shard, bound, err := r.listenStream("dns.doh", ap)
		if err != nil {
			return err
		}
		cfg := &tls.Config{GetCertificate: certs, MinVersion: tls.VersionTLS12, NextProtos: append([]string{"h2", "http/1.1"}, extraProtos...)}
		hl := newHandshakeListener(ln, cfg, c.HandshakeTimeout, &r.dohHandshakes)
		r.doh = append(r.doh, newDoHServer(r, bound, hl, shard))
	}
	for _, ap := range c.DoQ {
		d, err := r.listenDoQ(ap, certs, doqHandshakes)
		if err != nil {
			return err
		}
		r.doq = append(r.doq, d)
	}
	if err := r.listenDoH3(certs, doh3Handshakes); err != nil {
		return err
	}
	r.ddr = ddrRecords(c, r.DoTAddrs(), r.DoHAddrs(), r.DoQAddrs(), r.DoH3Addrs())
	if r.acme != nil {
		go r.acme.obtain()
	}
	return nil
}

// TLSCertificateProblem is the /health line of encrypted listeners with
// no usable certificate from dns.tls.acme; nil otherwise (certificate
// files that do not load stop the resolver from starting instead).
func (r *Resolver) TLSCertificateProblem() error {
	if r.acme == nil {
		return nil
	}
	return r.acme.problem(time.Now())
}

// listenStream binds one TCP address of an encrypted listener, behind
// allow_from, dns.tcp.max_connections and the per-client bound.
func (r *Resolver) listenStream(key string, ap netip.AddrPort) (*limitListener, *stats.Shard, netip.AddrPort, error) {
	ln, err := net.Listen("tcp", ap.String())
	if err != nil {
		return nil, nil, ap, fmt.Errorf("%s %s: %w (is the address this host's, and the port free?)", key, ap, err)
	}
	bound := ln.Addr().(*net.TCPAddr).AddrPort()
	shard := r.stats.Shard(uint(r.shardSeq.Add(1)))
	pc := &perClientListener{Listener: ln, max: r.cfg.Encrypted.MaxConnectionsPerClient, open: map[netip.Addr]int{}}
	return &limitListener{Listener: pc, max: int64(r.cfg.TCPMaxConnections), shard: shard, allowed: r.allowed},
		shard, bound, nil
}

// perClientListener closes, at once, a connection from an address that
// already has max open on the listener: one client (or one NAT) cannot
// take every connection the listener allows.
type perClientListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[netip.Addr]int
}

func (l *perClientListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		a, ok := c.RemoteAddr().(*net.TCPAddr)
		if !ok {
			return c, nil
		}
		addr := a.AddrPort().Addr().Unmap()
		l.mu.Lock()
		if l.open[addr] >= l.max {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.open[addr]++
		l.mu.Unlock()
		return &perClientConn{Conn: c, l: l, addr: addr}, nil
	}
}

func (l *perClientListener) release(a netip.Addr) {
	l.mu.Lock()
	if l.open[a]--; l.open[a] <= 0 {
		delete(l.open, a)
	}
	l.mu.Unlock()
}

type perClientConn struct {
	net.Conn
	l      *perClientListener
	addr   netip.Addr
	closed sync.Once
}

func (c *perClientConn) Close() error {
	c.closed.Do(func() { c.l.release(c.addr) })
	return c.Conn.Close()
}
