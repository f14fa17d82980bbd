// Package h2 is the HTTP/2 server of the resolver's DNS-over-HTTPS
// listener (internal/resolver, doh.go): the TLS connections that
// negotiate ALPN "h2" are served here, HTTP/1.1 ones stay with net/http.
// Where a query comes in, it sits between the TLS connection and the
// resolver's one entry: it reads frames, decodes each request's headers
// and body, hands the complete request to the connection's Handler on
// the connection's own reader, and writes the answer the handler gives —
// at once for what the entry answers itself, later, from any goroutine,
// for what goes to the slow path.
//
// It exists because net/http's general HTTP/2 server spent about four
// fifths of a DoH query's CPU (a goroutine, a request, a response writer
// and their buffers per stream); a DoH exchange is one small request and
// one small response, so this server keeps only what that needs: one
// reader goroutine per connection, answers of several streams written
// with one write, and no goroutine of its own per request.
//
// It speaks RFC 9113 as a server: SETTINGS (and their
// acknowledgement), PING, WINDOW_UPDATE and flow control both ways,
// RST_STREAM, GOAWAY, PRIORITY (read and ignored), HEADERS with
// CONTINUATION (golang.org/x/net/http2's Framer and hpack), DATA. Its
// defences are in Config: concurrent streams, header list size, body
// size, frame size, a bound on streams reset by the client (the rapid
// reset attack: a reset stream also keeps its slot until its answer is
// done), a bound on unwritten output (a client that does not read),
// preface, settings and idle timeouts.
package h2

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Config bounds what one connection may take. Zero values get the
// defaults below.
type Config struct {
	// MaxConcurrentStreams bounds the streams of a connection open at
	// once (advertised in SETTINGS); one more is refused (REFUSED_STREAM).
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds a request's decoded header list (RFC 9113
	// size: names, values, 32 bytes each); larger gets 431.
	MaxHeaderListSize uint32
	// MaxBodySize bounds a request body; larger is not read: the handler
	// gets the request with TooLarge set, and the stream is reset once
	// answered.
	MaxBodySize int
	// IdleTimeout closes (GOAWAY) a connection with no stream being
	// answered that reads nothing for this long; a frame begun must
	// arrive whole within it, and a write must complete within it.
	IdleTimeout time.Duration
	// PrefaceTimeout bounds the client's connection preface and first
	// SETTINGS frame, and the acknowledgement of ours.
	PrefaceTimeout time.Duration
	// MaxResetsPerSecond bounds the streams a client resets, or opens
	// beyond MaxConcurrentStreams, in one second; more closes the
	// connection with ENHANCE_YOUR_CALM.
	MaxResetsPerSecond int
	// MaxPendingOutput bounds the bytes written but not yet taken by the
	// client (answers, PING and SETTINGS acknowledgements); more closes
	// the connection: the client does not read.
	MaxPendingOutput int
}

// Defaults of Config.
const (
	DefaultMaxConcurrentStreams = 100
	DefaultMaxHeaderListSize    = 16 << 10
	DefaultMaxBodySize          = 65535
	DefaultIdleTimeout          = 30 * time.Second
	DefaultPrefaceTimeout       = 10 * time.Second
	DefaultMaxResetsPerSecond   = 200
	DefaultMaxPendingOutput     = 1 << 20
)

const (
	// connWindow is the connection's receive window: the client may send
	// this much body data ahead of our WINDOW_UPDATEs.
	connWindow = 1 << 20
	// maxFrameRead is the largest frame read (SETTINGS_MAX_FRAME_SIZE,
	// its default and least value: we never ask for more).
	maxFrameRead = 16 << 10
	// flushAt: a reader batch writes out its answers once this much is
	// pending, rather than waiting for the end of the input.
	flushAt = 32 << 10
	// flushFrames: nor do the answers of a client that never pauses
	// wait for more than this many of its frames.
	flushFrames = 128
	// maxSpare bounds the output buffer kept between writes.
	maxSpare = 16 << 10
	// maxWindow is the largest flow-control window (2^31-1).
	maxWindow = 1<<31 - 1
)

func (c Config) withDefaults() Config {
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if c.MaxHeaderListSize == 0 {
		c.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	if c.MaxBodySize <= 0 {
		c.MaxBodySize = DefaultMaxBodySize
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.PrefaceTimeout <= 0 {
		c.PrefaceTimeout = DefaultPrefaceTimeout
	}
	if c.MaxResetsPerSecond <= 0 {
		c.MaxResetsPerSecond = DefaultMaxResetsPerSecond
	}
	if c.MaxPendingOutput <= 0 {
		c.MaxPendingOutput = DefaultMaxPendingOutput
	}
	return c
}

// Request is one stream's request as the handler gets it. It is the
// connection's, reused for the next request: the handler keeps Body (its
// own) but not the Request.
type Request struct {
	Method, Path, Authority, ContentType string
	// ContentLength is the content-length header's value; -1 without one.
	ContentLength int64
	// Body is the request body (the handler's to keep); nil when TooLarge.
	Body []byte
	// TooLarge: the body is over MaxBodySize (or its content-length
	// says so) and was not read.
	TooLarge bool
}

// Handler answers a connection's requests. ServeH2 is called on the
// connection's reader, one request at a time, and must not block: it
// answers through s (Respond or Reset) before returning or later from
// any goroutine, once.
type Handler interface {
	ServeH2(s *Stream, req *Request)
}

// Server serves HTTP/2 connections and keeps them for Shutdown.
type Server struct {
	cfg   Config
	mu    sync.Mutex
	conns map[*conn]struct{}
	stop  bool
	wg    sync.WaitGroup
}

// NewServer returns a server bounded by cfg.
func NewServer(cfg Config) *Server {
	return &Server{cfg: cfg.withDefaults(), conns: map[*conn]struct{}{}}
}

// ServeConn serves nc, a connection that negotiated "h2", until it closes;
// h answers its requests. nc is closed on return.
func (s *Server) ServeConn(nc net.Conn, h Handler) {
	c := newConn(&s.cfg, nc, h)
	s.mu.Lock()
	if s.stop {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	c.serve()
}

// Shutdown sends every connection a GOAWAY, lets the streams already
// read be answered until deadline, then closes what is left. Connections
// served after it are closed at once.
func (s *Server) Shutdown(deadline time.Time) {
	s.mu.Lock()
	s.stop = true
	for c := range s.conns {
		c.shutdown()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	s.mu.Lock()
	for c := range s.conns {
		c.close()
	}
	s.mu.Unlock()
	<-done
}

// Stream is one request's stream: the handler answers it once.
type Stream struct {
	c  *conn
	id uint32

	// The reader's, under the connection's mu too where responders look.
	req        Request // headers, until the request is complete
	body       []byte
	recvWindow int64
	recvDone   bool // END_STREAM read (or the stream reset: reads no more)
	dispatched bool // the handler has it
	early      bool // dispatched before its body (too large): the rest is ignored

	// Under the connection's mu.
	sendWindow int64
	pending    []byte // the body's part that waits for flow control
	workDone   bool   // the handler answered (Respond, Reset)
	respDone   bool   // nothing more to write: END_STREAM or RST_STREAM sent
	blocked    bool   // in conn.blocked
	reset      bool
}

// ID is the stream's id.
func (s *Stream) ID() uint32 { return s.id }

// Handler is the handler of the stream's connection: what answers it
// later finds its connection's state there.
func (s *Stream) Handler() Handler { return s.c.h }

// Respond writes the answer: status, the header fields (lower-case
// names; content-length is added) and body, which is copied before
// Respond returns. Only the first Respond or Reset of a stream counts.
func (s *Stream) Respond(status int, header []hpack.HeaderField, body []byte) {
	c := s.c
	c.mu.Lock()
	if s.workDone {
		c.mu.Unlock()
		return
	}
	c.workFinished(s)
	if s.reset || c.closed {
		s.respDone = true
		c.release(s)
		c.mu.Unlock()
		return
	}
	c.writeHeaders(s, status, header, len(body))
	if len(body) > 0 {
		rest := c.writeData(s, body)
		if len(rest) > 0 {
			s.pending = append([]byte(nil), rest...)
		}
	}
	c.afterWrite(s)
	c.kickLocked()
}

// Reset abandons the stream with RST_STREAM code (no answer: a stub
// takes it as a failure, to try again or elsewhere).
func (s *Stream) Reset(code http2.ErrCode) {
	c := s.c
	c.mu.Lock()
	if s.workDone {
		c.mu.Unlock()
		return
	}
	c.workFinished(s)
	if !s.reset && !c.closed {
		_ = c.fr.WriteRSTStream(s.id, code)
		s.reset = true
	}
	s.respDone, s.pending = true, nil
	c.release(s)
	c.kickLocked()
}

// conn is one client connection.
type conn struct {
	cfg *Config
	nc  net.Conn
	h   Handler
	br  *bufio.Reader
	fr  *http2.Framer
	req Request // the handler's, reused

	// The header block being read (HEADERS, then CONTINUATIONs), decoded
	// as it comes by hdec, whose emit (a method value made once) fills hb:
	// no frame or field list per request.
	hdec *hpack.Decoder
	hb   headerBlock

	// The reader's.
	recvWindow  int64 // connection receive window left
	recvUnacked int64 // body bytes read and not yet given back
	resets      int   // resets counted in the second from resetsFrom
	resetsFrom  time.Time
	settingsAt  time.Time // our SETTINGS sent, not acknowledged yet (zero: acknowledged)

	mu         sync.Mutex
	cond       *sync.Cond // signalled when working drops to 0 or a flush ends
	out, spare []byte     // frames written, not yet flushed
	flushing   bool
	batching   bool // the reader is handling frames: it flushes when done
	werr       error
	closed     bool
	stopping   bool // Shutdown: read no more
	goaway     bool // GOAWAY sent
	maxID      uint32
	streams    map[uint32]*Stream
	working    int // streams handed to the handler, not answered yet
	blocked    []*Stream
	sendWindow int64
	peerWindow int64 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame  int   // the client's SETTINGS_MAX_FRAME_SIZE
	henc       *hpack.Encoder
	hbuf       bytes.Buffer
}

// connWriter is the framer's writer: frames go to conn.out (under mu).
type connWriter struct{ c *conn }

func (w connWriter) Write(p []byte) (int, error) {
	w.c.out = append(w.c.out, p...)
	return len(p), nil
}

func newConn(cfg *Config, nc net.Conn, h Handler) *conn {
	c := &conn{cfg: cfg, nc: nc, h: h, br: bufio.NewReaderSize(nc, 8<<10),
		recvWindow: connWindow, streams: map[uint32]*Stream{},
		sendWindow: 65535, peerWindow: 65535, peerFrame: 16384, batching: true}
	c.cond = sync.NewCond(&c.mu)
	c.fr = http2.NewFramer(connWriter{c}, c.br)
	c.fr.SetMaxReadFrameSize(maxFrameRead)
	c.fr.MaxHeaderListSize = cfg.MaxHeaderListSize
	c.hdec = hpack.NewDecoder(4096, c.emit)
	c.hdec.SetMaxStringLength(int(cfg.MaxHeaderListSize))
	c.fr.SetReuseFrames()
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// errClose stops reading; the connection is closed without more ado.
var errClose = errors.New("h2: close")

// serve runs the connection: the server preface, the client's, then
// frames until the connection ends; then it lets the streams read be
// answered and closes.
func (c *conn) serve() {
	defer c.close()
	c.mu.Lock()
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.cfg.MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(c.cfg.MaxBodySize) + 1},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.cfg.MaxHeaderListSize},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxFrameRead},
	)
	_ = c.fr.WriteWindowUpdate(0, connWindow-65535)
	c.settingsAt = time.Now()
	c.mu.Unlock()
	if err := c.preface(); err != nil {
		return
	}
	graceful := true
	n := 0 // frames handled since the last write
	for {
		if c.br.Buffered() == 0 {
			n = 0
		}
		if !c.wait() {
			break
		}
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.process(f)
		}
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				c.streamError(se.StreamID, se.Code)
				continue
			}
			if err == io.EOF {
				break // the client closed its side: answer what was read
			}
			graceful = false
			c.connError(err)
			break
		}
		n++
		c.mu.Lock()
		over := len(c.out) > c.cfg.MaxPendingOutput
		big := (len(c.out) >= flushAt || n >= flushFrames) && !c.flushing
		c.mu.Unlock()
		if over {
			graceful = false
			break
		}
		if big {
			n = 0
			c.flush()
			c.mu.Lock()
			c.batching = true
			// A client that keeps the reader busy is not idle: the read
			// deadline, set when the reader last waited, moves on (else a
			// read in the middle of a frame would time out under load).
			if !c.stopping {
				_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.IdleTimeout))
			}
			c.mu.Unlock()
		}
	}
	if graceful {
		c.drain()
	} else {
		c.flush()
	}
}

// preface reads the client preface and its first SETTINGS within the
// preface timeout.
func (c *conn) preface() error {
	c.flush()
	_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.PrefaceTimeout))
	var p [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, p[:]); err != nil || string(p[:]) != http2.ClientPreface {
		return errClose
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		c.connError(err)
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		c.connError(http2.ConnectionError(http2.ErrCodeProtocol))
		return errClose
	}
	if err := c.process(sf); err != nil {
		c.connError(err)
		return err
	}
	return nil
}

// wait returns once a frame's first byte is buffered; false: read no
// more (idle, shut down, the client gone). Before blocking it writes the
// answers of the frames handled since the last write.
func (c *conn) wait() bool {
	if c.br.Buffered() > 0 {
		return true
	}
	c.flush()
	for {
		c.mu.Lock()
		if c.stopping || c.werr != nil || c.closed {
			c.mu.Unlock()
			return false
		}
		armed := time.Now()
		d := c.cfg.IdleTimeout
		if !c.settingsAt.IsZero() {
			d = min(d, c.cfg.PrefaceTimeout-armed.Sub(c.settingsAt))
		}
		_ = c.nc.SetReadDeadline(armed.Add(d))
		c.mu.Unlock()
		_, err := c.br.Peek(1)
		if err == nil {
			c.mu.Lock()
			c.batching = true
			c.mu.Unlock()
			if time.Since(armed) > c.cfg.IdleTimeout/2 {
				_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.IdleTimeout))
			}
			return true
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return false
		}
		c.mu.Lock()
		stopping, busy := c.stopping, c.working > 0 || len(c.blocked) > 0
		unacked := !c.settingsAt.IsZero() && time.Since(c.settingsAt) >= c.cfg.PrefaceTimeout
		c.mu.Unlock()
		if stopping {
			return false
		}
		if unacked {
			c.connError(http2.ConnectionError(http2.ErrCodeSettingsTimeout))
			return false
		}
		if busy {
			continue // answers pending: not idle
		}
		c.goAway(http2.ErrCodeNo)
		return false
	}
}

// process handles one frame.
func (c *conn) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		return c.onHeaderBlock(f.StreamID, f.HeaderBlockFragment(), true, f.StreamEnded(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		// The Framer checks that it follows its HEADERS.
		return c.onHeaderBlock(f.StreamID, f.HeaderBlockFragment(), false, false, f.HeadersEnded())
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		c.mu.Lock()
		_ = c.fr.WritePing(true, f.Data)
		c.mu.Unlock()
		return nil
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.GoAwayFrame:
		return io.EOF // the client leaves: answer what was read, then close
	case *http2.PriorityFrame:
		return nil // RFC 9113 deprecates priorities; every answer is small
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // a client never pushes
	default:
		return nil // unknown frame types are ignored (RFC 9113 §4.1)
	}
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		c.settingsAt = time.Time{}
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	grew := false
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerWindow
			for _, st := range c.streams {
				if st.sendWindow+delta > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
				st.sendWindow += delta
			}
			c.peerWindow = int64(s.Val)
			grew = grew || delta > 0
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	_ = c.fr.WriteSettingsAck()
	if grew {
		c.resume()
	}
	return nil
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if c.sendWindow+inc > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWindow += inc
		c.resume()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
		}
		return nil // closed: frames in flight are ignored
	}
	if st.sendWindow+inc > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	st.sendWindow += inc
	c.resume()
	return nil
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	if f.StreamID > c.maxID {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	st := c.streams[f.StreamID]
	if st != nil {
		c.resetLocked(st)
	}
	c.mu.Unlock()
	if st != nil {
		return c.countReset()
	}
	return nil
}

// resetLocked ends st on a reset, either side's: nothing more is read or
// written on it. A stream whose answer is being worked out keeps its
// slot until the handler answers (into nothing): resets cannot open
// more work than MaxConcurrentStreams at once.
func (c *conn) resetLocked(st *Stream) {
	st.reset, st.recvDone, st.respDone, st.pending = true, true, true, nil
	if !st.dispatched {
		st.workDone = true
	}
	c.release(st)
}

// countReset counts a stream the client reset or opened over the bound;
// over MaxResetsPerSecond in one second closes the connection.
func (c *conn) countReset() error {
	now := time.Now()
	if now.Sub(c.resetsFrom) >= time.Second {
		c.resetsFrom, c.resets = now, 0
	}
	c.resets++
	if c.resets > c.cfg.MaxResetsPerSecond {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	return nil
}

// maxHeaderBlockFrames bounds the frames of one header block (a HEADERS
// and its CONTINUATIONs): DefaultMaxHeaderListSize fits in two frames of
// the smallest frame size, 16 KiB; the rest is room for clients that
// split a block finely.
const maxHeaderBlockFrames = 64

// headerBlock is what a request's header block says, as decoded.
type headerBlock struct {
	id          uint32
	endStream   bool
	remain      uint32 // of MaxHeaderListSize
	frames      int    // HEADERS and CONTINUATIONs so far
	truncated   bool   // over MaxHeaderListSize: the rest not kept
	invalid     bool   // a malformed field: the stream is reset
	sawRegular  bool
	badLength   bool
	connection  bool // a connection-specific field
	scheme      bool
	method      string
	path        string
	authority   string
	contentType string
	length      int64
}

// emit takes one decoded field (hpack calls it), checked as RFC 9113
// §8.2 wants: names lower case and valid, values without CR, LF or NUL,
// pseudo-fields known, once each, before the others; the list within
// MaxHeaderListSize.
func (c *conn) emit(hf hpack.HeaderField) {
	h := &c.hb
	if h.invalid || h.truncated {
		return
	}
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		h.invalid = true
		return
	}
	if size := hf.Size(); size > h.remain {
		h.truncated = true
		c.hdec.SetEmitEnabled(false)
		return
	} else {
		h.remain -= size
	}
	if strings.HasPrefix(hf.Name, ":") {
		if h.sawRegular {
			h.invalid = true
			return
		}
		var dst *string
		switch hf.Name {
		case ":method":
			dst = &h.method
		case ":path":
			dst = &h.path
		case ":authority":
			dst = &h.authority
		case ":scheme":
			if h.scheme {
				h.invalid = true
			}
			h.scheme = true
			return
		default:
			h.invalid = true
			return
		}
		if *dst != "" {
			h.invalid = true // twice
			return
		}
		*dst = hf.Value
		return
	}
	h.sawRegular = true
	if !validFieldName(hf.Name) {
		h.invalid = true
		return
	}
	switch hf.Name {
	case "content-type":
		if h.contentType == "" {
			h.contentType = hf.Value
		}
	case "host":
		if h.authority == "" {
			h.authority = hf.Value
		}
	case "content-length":
		n, err := strconv.ParseInt(hf.Value, 10, 64)
		if err != nil || n < 0 || h.length >= 0 && h.length != n {
			h.badLength = true
		}
		h.length = n
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		h.connection = true // connection-specific: malformed in HTTP/2 (RFC 9113 §8.2.2)
	}
}

// validFieldName: a token in lower case.
func validFieldName(name string) bool {
	if !httpguts.ValidHeaderFieldName(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if 'A' <= name[i] && name[i] <= 'Z' {
			return false
		}
	}
	return true
}

// onHeaderBlock decodes one fragment of a header block (first: its
// HEADERS frame); at its end the request's headers are done.
func (c *conn) onHeaderBlock(id uint32, frag []byte, first, endStream, ended bool) error {
	h := &c.hb
	if first {
		*h = headerBlock{id: id, endStream: endStream, remain: c.cfg.MaxHeaderListSize, length: -1}
		c.hdec.SetEmitEnabled(true)
	}
	// As the Framer's own decoding: a fragment far over what may still
	// be kept, or any after a malformed field, ends the connection
	// rather than being decoded (CONTINUATION floods).
	if int64(len(frag)) > 2*int64(h.remain) || h.invalid && !first {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	// Nor may a block run on in frames too small to count against the
	// list's size (an endless run of empty CONTINUATIONs): a whole
	// header list fits in a frame or two at the smallest frame size.
	if h.frames++; h.frames > maxHeaderBlockFrames {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	if _, err := c.hdec.Write(frag); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	if !ended {
		return nil
	}
	if err := c.hdec.Close(); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	return c.onHeaders(h)
}

func (c *conn) onHeaders(f *headerBlock) error {
	id := f.id
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if f.invalid {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	c.mu.Lock()
	if id <= c.maxID {
		st := c.streams[id]
		c.mu.Unlock()
		if st == nil {
			return nil // closed (we reset it): in flight, ignored
		}
		if st.recvDone || !f.endStream {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		// Trailers: the request ends here; their fields are not used.
		return c.endRequest(st)
	}
	c.maxID = id
	if c.stopping || c.goaway {
		c.mu.Unlock()
		return nil // after our GOAWAY: not processed, the client retries elsewhere
	}
	if len(c.streams) >= int(c.cfg.MaxConcurrentStreams) {
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
		c.mu.Unlock()
		return c.countReset()
	}
	st := &Stream{c: c, id: id, recvWindow: int64(c.cfg.MaxBodySize) + 1, sendWindow: c.peerWindow}
	c.streams[id] = st
	c.mu.Unlock()

	r := &st.req
	*r = Request{Method: f.method, Path: f.path, Authority: f.authority, ContentType: f.contentType, ContentLength: f.length}
	if f.badLength || f.connection {
		c.refuse(st)
		return nil
	}
	if f.truncated {
		c.dispatch(st, true)
		return nil
	}
	if r.Method == "" || r.Path == "" || !f.scheme {
		c.refuse(st)
		return nil
	}
	if r.ContentLength > int64(c.cfg.MaxBodySize) {
		st.req.TooLarge = true
		c.dispatch(st, false)
		return nil
	}
	if f.endStream {
		return c.endRequest(st)
	}
	return nil
}

// refuse resets st, a malformed request, with PROTOCOL_ERROR: it is
// not handed to the handler.
func (c *conn) refuse(st *Stream) {
	c.mu.Lock()
	c.resetLocked(st)
	_ = c.fr.WriteRSTStream(st.id, http2.ErrCodeProtocol)
	c.mu.Unlock()
}

// endRequest: the request is whole; hand it to the handler.
func (c *conn) endRequest(st *Stream) error {
	c.mu.Lock()
	st.recvDone = true
	c.mu.Unlock()
	if st.early {
		return nil // answered early (too large), the rest ignored
	}
	if st.req.ContentLength >= 0 && st.req.ContentLength != int64(len(st.body)) {
		c.refuse(st)
		return nil
	}
	c.dispatch(st, false)
	return nil
}

// dispatch hands st's request to the handler. With truncated headers
// (over MaxHeaderListSize) the server answers 431 itself.
func (c *conn) dispatch(st *Stream, truncated bool) {
	c.mu.Lock()
	st.dispatched = true
	c.working++
	c.mu.Unlock()
	if truncated {
		st.Respond(431, []hpack.HeaderField{{Name: "content-type", Value: "application/json"}},
			[]byte(`{"error":"request header fields too large"}`+"\n"))
		return
	}
	c.req = st.req
	c.req.Body = st.body
	st.early = c.req.TooLarge
	st.req, st.body = Request{}, nil
	if c.req.TooLarge {
		c.req.Body = nil
	}
	c.h.ServeH2(st, &c.req)
}

func (c *conn) onData(f *http2.DataFrame) error {
	n := int64(f.Header().Length) // padding included: flow control counts it
	id := f.StreamID
	c.recvWindow -= n
	if c.recvWindow < 0 {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvUnacked += n
	c.mu.Lock()
	if c.recvUnacked >= connWindow/2 {
		_ = c.fr.WriteWindowUpdate(0, uint32(c.recvUnacked))
		c.recvWindow += c.recvUnacked
		c.recvUnacked = 0
	}
	st := c.streams[id]
	if st == nil {
		maxID := c.maxID
		c.mu.Unlock()
		if id > maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
		}
		return nil // closed (reset): in flight, ignored
	}
	if st.recvDone {
		c.mu.Unlock()
		if st.early || st.reset {
			return nil
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	st.recvWindow -= n
	if st.recvWindow < 0 {
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	c.mu.Unlock()
	if !st.dispatched {
		d := f.Data()
		if len(st.body)+len(d) > c.cfg.MaxBodySize {
			st.body, st.req.TooLarge = nil, true
			c.dispatch(st, false)
		} else {
			st.body = append(st.body, d...)
		}
	}
	if f.StreamEnded() {
		return c.endRequest(st)
	}
	return nil
}

// streamError resets a stream for an error of its own (a malformed
// request, its flow control): the connection goes on.
func (c *conn) streamError(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	if id > c.maxID && id%2 == 1 {
		c.maxID = id
	}
	if st := c.streams[id]; st != nil {
		c.resetLocked(st)
	}
	_ = c.fr.WriteRSTStream(id, code)
	c.mu.Unlock()
}

// connError ends the connection for err: a GOAWAY with its code when it
// is a protocol error.
func (c *conn) connError(err error) {
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ce):
		c.goAway(http2.ErrCode(ce))
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.goAway(http2.ErrCodeFrameSize)
	}
}

func (c *conn) goAway(code http2.ErrCode) {
	c.mu.Lock()
	if !c.goaway && !c.closed {
		_ = c.fr.WriteGoAway(c.maxID, code, nil)
		c.goaway = true
	}
	c.mu.Unlock()
}

// shutdown (Server.Shutdown): GOAWAY, then the reader stops.
func (c *conn) shutdown() {
	c.mu.Lock()
	c.stopping = true
	if !c.goaway && !c.closed {
		_ = c.fr.WriteGoAway(c.maxID, http2.ErrCodeNo, nil)
		c.goaway = true
	}
	// The reader wakes, stops reading and writes the rest (drain): not
	// written here, where a client that does not read would hold
	// Shutdown.
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	c.mu.Unlock()
}

// drain waits, at most the idle timeout, for the answers of the streams
// read, and writes them.
func (c *conn) drain() {
	t := time.AfterFunc(c.cfg.IdleTimeout, func() {
		c.mu.Lock()
		c.closed = true
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer t.Stop()
	c.mu.Lock()
	c.batching = false
	for !c.closed && c.werr == nil && (c.working > 0 || len(c.blocked) > 0 || c.flushing || len(c.out) > 0) {
		if len(c.out) > 0 && !c.flushing {
			c.flushLocked()
			c.mu.Lock()
			continue
		}
		c.cond.Wait()
	}
	c.mu.Unlock()
}

func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	c.out, c.spare, c.blocked = nil, nil, nil
	c.cond.Broadcast()
	c.mu.Unlock()
	_ = c.nc.Close()
}

// workFinished: the handler answered s (mu held).
func (c *conn) workFinished(s *Stream) {
	s.workDone = true
	if c.working--; c.working == 0 {
		c.cond.Broadcast()
	}
}

// release forgets st once it is answered and written (mu held).
func (c *conn) release(st *Stream) {
	if st.workDone && st.respDone && c.streams[st.id] == st {
		delete(c.streams, st.id)
	}
}

// afterWrite: once st's answer is all written, a request still being
// sent is cut short (RST_STREAM NO_ERROR, RFC 9113 §8.1) and st released.
func (c *conn) afterWrite(st *Stream) {
	if len(st.pending) > 0 {
		if !st.blocked {
			st.blocked = true
			c.blocked = append(c.blocked, st)
		}
		return
	}
	st.respDone = true
	if !st.recvDone {
		_ = c.fr.WriteRSTStream(st.id, http2.ErrCodeNo)
		st.recvDone = true
	}
	c.release(st)
}

// itoa is strconv.Itoa without an allocation for the common statuses.
func itoa(n int) string {
	switch n {
	case 200:
		return "200"
	case 400:
		return "400"
	case 404:
		return "404"
	}
	return strconv.Itoa(n)
}

// writeHeaders writes a response's HEADERS (and CONTINUATIONs), with
// END_STREAM when there is no body (mu held).
func (c *conn) writeHeaders(s *Stream, status int, header []hpack.HeaderField, bodyLen int) {
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: itoa(status)})
	for _, hf := range header {
		_ = c.henc.WriteField(hf)
	}
	_ = c.henc.WriteField(hpack.HeaderField{Name: "content-length", Value: itoa(bodyLen)})
	block := c.hbuf.Bytes()
	first := true
	for {
		n := min(len(block), c.peerFrame)
		end := n == len(block)
		if first {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: block[:n],
				EndStream: bodyLen == 0, EndHeaders: end})
			first = false
		} else {
			_ = c.fr.WriteContinuation(s.id, end, block[:n])
		}
		block = block[n:]
		if end {
			break
		}
	}
}

// writeData writes as much of data as the windows allow; it returns the
// rest (mu held).
func (c *conn) writeData(s *Stream, data []byte) []byte {
	for len(data) > 0 {
		n := min(int64(len(data)), int64(c.peerFrame), s.sendWindow, c.sendWindow)
		if n <= 0 {
			return data
		}
		_ = c.fr.WriteData(s.id, n == int64(len(data)), data[:n])
		data = data[n:]
		s.sendWindow -= n
		c.sendWindow -= n
	}
	return nil
}

// resume writes what waits for flow control, as the windows now allow
// (mu held).
func (c *conn) resume() {
	kept := c.blocked[:0]
	for _, st := range c.blocked {
		if st.reset || c.closed {
			st.blocked = false
			continue
		}
		st.pending = c.writeData(st, st.pending)
		if len(st.pending) > 0 {
			kept = append(kept, st)
			continue
		}
		st.blocked = false
		st.pending = nil
		c.afterWrite(st)
	}
	clear(c.blocked[len(kept):])
	c.blocked = kept
	if len(c.blocked) == 0 {
		c.cond.Broadcast()
	}
}

// flush writes out what is pending and ends the reader's batch.
func (c *conn) flush() {
	c.mu.Lock()
	c.batching = false
	c.flushLocked()
}

// kickLocked writes out what is pending unless the reader (which
// writes at the end of its batch) or another writer will; it releases mu.
func (c *conn) kickLocked() {
	if c.batching || c.flushing {
		c.mu.Unlock()
		return
	}
	c.flushLocked()
}

// flushLocked writes c.out until nothing is left, mu released while
// writing (others append meanwhile: one write carries the answers ready
// together). Entered with mu held; returns with it released. A write
// that fails, or does not complete within the idle timeout, closes the
// connection.
func (c *conn) flushLocked() {
	if c.flushing || c.closed {
		c.mu.Unlock()
		return
	}
	c.flushing = true
	for len(c.out) > 0 && c.werr == nil {
		out := c.out
		c.out, c.spare = c.spare[:0], nil
		c.mu.Unlock()
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.IdleTimeout))
		_, err := c.nc.Write(out)
		c.mu.Lock()
		if err != nil {
			c.werr, c.out = err, nil
			break
		}
		if cap(out) <= maxSpare {
			c.spare = out[:0]
		}
	}
	c.flushing = false
	err := c.werr
	c.cond.Broadcast()
	c.mu.Unlock()
	if err != nil {
		_ = c.nc.Close()
	}
}
