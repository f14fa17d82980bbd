package resolver

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
	"github.com/svc-pf/svc-pf/internal/resolver/h2"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// dohServer serves DNS over HTTPS (RFC 8484) on one address: the DoH
// adapter of the entry (serve.go). The listener is the TCP adapter's
// (allow_from, dns.tcp.max_connections) behind the per-client bound and
// the TLS handshake (tlshandshake.go). A connection that negotiated
// HTTP/2 is served by package h2: its requests are handed to the entry
// on the connection's reader, the answers the entry gives at once
// (errors, refusals) written from there, the slow path's from its own
// goroutine; its streams are bounded by
// dns.tls.max_queries_per_connection. HTTP/1.1 (one request at a time)
// stays with net/http, each request's query handed to the entry on the
// request's goroutine.
type dohServer struct {
	r      *Resolver
	addr   netip.AddrPort
	srv    *http.Server // HTTP/1.1
	h2     *h2.Server
	ln     *handshakeListener
	h1     *connQueue // the HTTP/1.1 connections, for srv
	hdr    dohHeaders
	altSvc string // the Alt-Svc of dns.doh3 (doh3.go); "": none
	shard  *stats.Shard
	fronts sync.Pool // *front: the entry's scratch, one per request at a time
}

// dohPath is the path queries are sent to; /dohPath/{client_id} carries a
// client id.
const dohPath = "/dns-query"

// dohMediaType is the only content type a DoH message has.
const dohMediaType = "application/dns-message"

// newDoHServer serves DoH on ln, a handshakeListener: its connections
// come with their TLS handshake done (ALPN h2 or http/1.1).
func newDoHServer(r *Resolver, addr netip.AddrPort, ln *handshakeListener, shard *stats.Shard) *dohServer {
	d := &dohServer{r: r, addr: addr, ln: ln, shard: shard, h1: newConnQueue(ln.Addr()), hdr: newDoHHeaders()}
	d.fronts.New = func() any { return newFront(r, shard, nil, nil) }
	c := &r.cfg.Encrypted
	var hp http.Protocols
	hp.SetHTTP1(true)
	d.srv = &http.Server{
		Handler:   d,
		TLSConfig: ln.cfg,
		Protocols: &hp,
		// A request's headers and body must come within the idle
		// timeout; a reply is written within the query's own bound.
		ReadHeaderTimeout: c.IdleTimeout,
		ReadTimeout:       c.IdleTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          log.New(slogWriter{r.log}, "", 0),
	}
	d.h2 = h2.NewServer(h2.Config{
		MaxConcurrentStreams: uint32(min(c.MaxQueriesPerConnection, 1<<20)),
		MaxHeaderListSize:    16 << 10,
		MaxBodySize:          dnswire.MaxMsgLen,
		IdleTimeout:          c.IdleTimeout,
		PrefaceTimeout:       c.HandshakeTimeout,
	})
	return d
}

// serve serves until the listener closes: HTTP/2 connections here, the
// others through net/http.
func (d *dohServer) serve() {
	go func() {
		if err := d.srv.Serve(d.h1); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			d.r.log.Error("dns.doh: serving HTTP/1.1 stopped; restart the resolver", "addr", d.addr, "err", err)
		}
	}()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			d.h1.close()
			if !errors.Is(err, net.ErrClosed) {
				d.r.log.Error("dns.doh: serving stopped; restart the resolver", "addr", d.addr, "err", err)
			}
			return
		}
		tc, ok := c.(*tls.Conn)
		if !ok || tc.ConnectionState().NegotiatedProtocol != "h2" {
			if !d.h1.put(c) {
				_ = c.Close()
			}
			continue
		}
		go d.serveH2(tc)
	}
}

// serveH2 serves one HTTP/2 connection.
func (d *dohServer) serveH2(tc *tls.Conn) {
	h := &dohH2Conn{d: d, front: newFront(d.r, d.shard, nil, nil),
		sniID: clientIDFromSNI(tc.ConnectionState().ServerName, d.r.cfg.Encrypted.ClientIDSuffix)}
	if a, ok := tc.RemoteAddr().(*net.TCPAddr); ok {
		h.from = a.AddrPort()
	}
	d.h2.ServeConn(tc, h)
}

// stop stops accepting and lets the requests read be answered until
// deadline, then closes what is left.
func (d *dohServer) stop(deadline time.Time) {
	_ = d.ln.Close()
	d.h1.close()
	done := make(chan struct{})
	go func() {
		d.h2.Shutdown(deadline)
		close(done)
	}()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if d.srv.Shutdown(ctx) != nil {
		_ = d.srv.Close()
	}
	<-done
}

// connQueue is the net.Listener net/http serves HTTP/1.1 from: the
// connections the DoH listener hands it.
type connQueue struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// put hands c to Accept; false once closed.
func (q *connQueue) put(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) close() { q.once.Do(func() { close(q.done) }) }

func (q *connQueue) Close() error {
	q.close()
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// dohError is a request refused before it reaches the entry: a 4xx with
// {"error": …}, as every HTTP endpoint of the project answers bad input
// (a stub ignores the body; an operator with curl reads it).
type dohError struct {
	status int
	msg    string
}

func (e *dohError) Error() string { return e.msg }

// parseDoHRequest reads a DoH request of net/http (HTTP/1.1): as
// parseDoH, the body read at most one byte past the bound.
func parseDoHRequest(req *http.Request) (pkt []byte, clientID string, err error) {
	body := func() ([]byte, bool, error) {
		b, err := io.ReadAll(io.LimitReader(req.Body, dnswire.MaxMsgLen+1))
		return b, len(b) > dnswire.MaxMsgLen, err
	}
	return parseDoH(req.Method, req.URL.Path, req.URL.RawQuery, req.Header.Get("Content-Type"), req.ContentLength, body)
}

// parseDoH reads a DoH request: the query (GET ?dns=base64url, or a
// POST body of application/dns-message, at most 65535 bytes) and the
// client id of /dns-query/{client_id} ("" for /dns-query). path is
// decoded (no %xx), rawQuery not; body reads the body, saying whether
// it is over the bound. Anything else is a *dohError with a 4xx status.
// The query is not parsed here (the entry does: a malformed one gets
// FORMERR, as over UDP). HTTP/1.1 and HTTP/2 share it.
func parseDoH(method, path, rawQuery, ctype string, contentLength int64,
	body func() ([]byte, bool, error)) (pkt []byte, clientID string, err error) {
	switch {
	case path == dohPath:
	case strings.HasPrefix(path, dohPath+"/"):
		id, ok := validClientID(path[len(dohPath)+1:])
		if !ok {
			return nil, "", &dohError{http.StatusBadRequest, "bad client id: want 1-63 characters of a-z, 0-9 and -"}
		}
		clientID = id
	default:
		return nil, "", &dohError{http.StatusNotFound, "not found: queries go to " + dohPath}
	}
	switch method {
	case http.MethodGet:
		v, n := dnsParam(rawQuery)
		if n != 1 || v == "" {
			return nil, "", &dohError{http.StatusBadRequest, "missing dns parameter"}
		}
		s := strings.TrimRight(v, "=") // RFC 8484 sends none; tolerate them
		if base64.RawURLEncoding.DecodedLen(len(s)) > dnswire.MaxMsgLen {
			return nil, "", &dohError{http.StatusRequestURITooLong, "dns parameter too long"}
		}
		pkt, err = base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			return nil, "", &dohError{http.StatusBadRequest, "dns parameter is not base64url"}
		}
	case http.MethodPost:
		if ctype != dohMediaType { // the common case, without parsing
			mt, _, err := mime.ParseMediaType(ctype)
			if err != nil || mt != dohMediaType {
				return nil, "", &dohError{http.StatusUnsupportedMediaType, "content type must be " + dohMediaType}
			}
		}
		if contentLength > dnswire.MaxMsgLen {
			return nil, "", &dohError{http.StatusRequestEntityTooLarge, "body larger than 65535 bytes"}
		}
		var over bool
		pkt, over, err = body()
		if err != nil {
			return nil, "", &dohError{http.StatusBadRequest, "body not read"}
		}
		if over {
			return nil, "", &dohError{http.StatusRequestEntityTooLarge, "body larger than 65535 bytes"}
		}
	default:
		return nil, "", &dohError{http.StatusMethodNotAllowed, "method must be GET or POST"}
	}
	if len(pkt) == 0 {
		return nil, "", &dohError{http.StatusBadRequest, "empty DNS message"}
	}
	return pkt, clientID, nil
}

// dnsParam is the value of the query string's dns parameter and how many
// there are, as url.ParseQuery reads them (pairs split on &, a pair with
// a ; or a bad escape skipped, keys and values unescaped), without its
// map.
func dnsParam(rawQuery string) (v string, n int) {
	for rawQuery != "" {
		var kv string
		kv, rawQuery, _ = strings.Cut(rawQuery, "&")
		if strings.Contains(kv, ";") {
			continue
		}
		k, val, _ := strings.Cut(kv, "=")
		if k != "dns" {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			if u, err := url.QueryUnescape(k); err != nil || u != "dns" {
				continue
			}
		}
		if strings.ContainsAny(val, "%+") {
			u, err := url.QueryUnescape(val)
			if err != nil {
				continue
			}
			val = u
		}
		v, n = val, n+1
	}
	return v, n
}

// ServeHTTP answers one DoH request.
func (d *dohServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// The query's slow path runs on this goroutine (request.inline):
	// grow its stack once, here, where few frames are copied, rather
	// than step by step deep inside the answer (growStack, udp.go).
	growStack(int(req.ContentLength))
	if d.altSvc != "" {
		w.Header().Set("Alt-Svc", d.altSvc)
	}
	pkt, clientID, err := parseDoHRequest(req)
	if err != nil {
		var de *dohError
		if !errors.As(err, &de) {
			de = &dohError{http.StatusBadRequest, err.Error()}
		}
		if de.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", "GET, POST")
		}
		httpapi.WriteError(w, de.status, de.msg)
		return
	}
	if clientID == "" && req.TLS != nil {
		clientID = clientIDFromSNI(req.TLS.ServerName, d.r.cfg.Encrypted.ClientIDSuffix)
	}
	from, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, "no client address")
		return
	}
	r := d.r
	rp := &dohReplier{fin: make(chan struct{})}
	v := r.engine.View()
	rq := request{from: from, transport: policy.TransportDoH, clientID: clientID, pkt: pkt, start: r.now(), owned: true, inline: true}
	f := d.fronts.Get().(*front)
	reply, out := f.serve(rp, &rq, &v, -1, nil)
	d.fronts.Put(f)
	switch out {
	case outReply:
		writeDoH(w, reply)
	case outClose:
		// A response, or no DNS header at all: nothing to answer.
		httpapi.WriteError(w, http.StatusBadRequest, "not a DNS query")
	case outPending:
		select {
		case <-rp.fin:
		case <-req.Context().Done():
			return // the client went away; the slow path's reply is dropped
		}
		if rp.drop || rp.wire == nil {
			// The policy dropped the query: no answer, as a TCP
			// connection is closed. The stream is reset (HTTP/2) or the
			// connection closed (HTTP/1.1), which a stub takes as a
			// failure to try again or elsewhere.
			panic(http.ErrAbortHandler)
		}
		writeDoH(w, rp.wire)
	}
}

// dohH2Conn answers the requests of one HTTP/2 connection (package
// h2), on its reader: the entry's scratch is the connection's.
type dohH2Conn struct {
	d     *dohServer
	from  netip.AddrPort
	sniID string // the client id of the TLS server name
	front *front
	buf   []byte // the entry's immediate answers
}

// dohHeaders are the header fields of the HTTP/2 answers (besides
// :status and content-length), made once per listener.
type dohHeaders struct {
	ok, err, allow []hpack.HeaderField
}

func newDoHHeaders() dohHeaders {
	return dohHeaders{
		ok: []hpack.HeaderField{{Name: "content-type", Value: dohMediaType},
			// the answer is this client's policy's, not for shared caches
			{Name: "cache-control", Value: "no-store"}},
		err:   []hpack.HeaderField{{Name: "content-type", Value: "application/json"}},
		allow: []hpack.HeaderField{{Name: "content-type", Value: "application/json"}, {Name: "allow", Value: "GET, POST"}},
	}
}

// ServeH2 hands one request to the entry. What the entry answers at
// once is written from here, and so is a query whose answer the record
// cache holds (its slow path runs here: inlineHit); any other query on
// the slow path is answered on a goroutine of its own (the reader goes
// on with the connection's next streams), through the stream as its
// replier.
func (h *dohH2Conn) ServeH2(s *h2.Stream, req *h2.Request) {
	path, rawQuery, _ := strings.Cut(req.Path, "?")
	if strings.IndexByte(path, '%') >= 0 {
		if p, err := url.PathUnescape(path); err == nil {
			path = p
		}
	}
	body := func() ([]byte, bool, error) { return req.Body, req.TooLarge, nil }
	pkt, clientID, err := parseDoH(req.Method, path, rawQuery, req.ContentType, req.ContentLength, body)
	if err != nil {
		var de *dohError
		if !errors.As(err, &de) {
			de = &dohError{http.StatusBadRequest, err.Error()}
		}
		h.respondError(s, de.status, de.msg)
		return
	}
	if clientID == "" {
		clientID = h.sniID
	}
	r := h.d.r
	v := r.engine.View()
	rq := request{from: h.from, transport: policy.TransportDoH, clientID: clientID, pkt: pkt, start: r.now(), owned: true,
		inlineHit: true}
	reply, out := h.front.serve((*dohStream)(s), &rq, &v, -1, h.buf[:0])
	switch out {
	case outReply:
		s.Respond(http.StatusOK, h.d.hdr.ok, padReply(reply))
		if cap(reply) <= 4<<10 {
			h.buf = reply[:0]
		}
	case outClose:
		// A response, or no DNS header at all: nothing to answer.
		h.respondError(s, http.StatusBadRequest, "not a DNS query")
	}
}

// respondError answers {"error": msg} with status, as
// httpapi.WriteError does over HTTP/1.1.
func (h *dohH2Conn) respondError(s *h2.Stream, status int, msg string) {
	b, _ := json.Marshal(httpapi.ErrorBody{Error: msg})
	hdr := h.d.hdr.err
	if status == http.StatusMethodNotAllowed {
		hdr = h.d.hdr.allow
	}
	s.Respond(status, hdr, append(b, '\n'))
}

// dohStream is an HTTP/2 stream as the replier of its slow-path query.
type dohStream h2.Stream

func (p *dohStream) send(_ *replyScratch, wire []byte, _ netip.AddrPort) error {
	s := (*h2.Stream)(p)
	s.Respond(http.StatusOK, s.Handler().(*dohH2Conn).d.hdr.ok, padReply(wire)) // copies wire
	return nil
}

// dropped: the policy dropped the query: the stream is reset, which a
// stub takes as a failure to try again or elsewhere.
func (p *dohStream) dropped() { (*h2.Stream)(p).Reset(http2.ErrCodeInternal) }

// done: a query the slow path did not answer (it always does) is reset
// rather than left open.
func (p *dohStream) done() { (*h2.Stream)(p).Reset(http2.ErrCodeInternal) }

// writeDoH writes a reply, padded (pad.go).
func writeDoH(w http.ResponseWriter, wire []byte) {
	wire = padReply(wire)
	h := w.Header()
	h.Set("Content-Type", dohMediaType)
	h.Set("Cache-Control", "no-store") // the answer is this client's policy's, not for shared caches
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(wire)
}

// dohReplier is one request's replier: the slow path's reply comes back
// to the request's goroutine, which waits for fin.
type dohReplier struct {
	wire []byte
	drop bool
	fin  chan struct{}
}

func (p *dohReplier) send(_ *replyScratch, wire []byte, _ netip.AddrPort) error {
	p.wire = append([]byte(nil), wire...) // wire is the pool's buffer
	return nil
}
func (p *dohReplier) dropped() { p.drop = true }
func (p *dohReplier) done()    { close(p.fin) }

// slogWriter carries net/http's own log lines (TLS handshake errors and
// the like) to the resolver's logger, at debug: a client's broken
// handshake is the client's affair.
type slogWriter struct{ log *slog.Logger }

func (s slogWriter) Write(b []byte) (int, error) {
	s.log.Debug("dns.doh: " + strings.TrimSpace(string(b)))
	return len(b), nil
}
