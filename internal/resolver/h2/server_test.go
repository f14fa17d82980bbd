package h2_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/svc-pf/svc-pf/internal/resolver/h2"
)

// bound is how long a test waits for what should come at once.
const bound = 5 * time.Second

// echo answers "METHOD PATH BODY"; paths under /async answer from a
// goroutine of their own after a little while, /hang after a second,
// /big answers 200 000 bytes, /reset resets the stream; a body over the
// bound gets 413.
type echo struct{}

func (echo) ServeH2(s *h2.Stream, req *h2.Request) {
	hdr := []hpack.HeaderField{{Name: "content-type", Value: "text/plain"}}
	switch {
	case req.TooLarge:
		s.Respond(413, hdr, []byte("too large"))
	case req.Path == "/big":
		s.Respond(200, hdr, bytes.Repeat([]byte("0123456789"), 20000))
	case req.Path == "/reset":
		s.Reset(http2.ErrCodeInternal)
	case strings.HasPrefix(req.Path, "/async"):
		body := fmt.Sprintf("%s %s %s", req.Method, req.Path, req.Body)
		go func() {
			time.Sleep(2 * time.Millisecond)
			s.Respond(200, hdr, []byte(body))
		}()
	case req.Path == "/hang":
		// answered a second later: holds its stream meanwhile
		time.AfterFunc(time.Second, func() { s.Respond(204, nil, nil) })
	default:
		s.Respond(200, hdr, fmt.Appendf(nil, "%s %s %s", req.Method, req.Path, req.Body))
	}
}

// serve runs a server on 127.0.0.1 (plain TCP: HTTP/2 with prior
// knowledge, the TLS side being the resolver's), returning its address.
func serve(t *testing.T, cfg h2.Config, h h2.Handler) (string, *h2.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := h2.NewServer(cfg)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { s.ServeConn(c, h) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.Shutdown(time.Now().Add(100 * time.Millisecond))
		wg.Wait()
	})
	return ln.Addr().String(), s
}

// goClient is Go's own HTTP/2 client (net/http's), with prior knowledge
// over TCP.
func goClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: bound}
}

// TestGoClient: Go's HTTP/2 client's GETs and POSTs, many at once over
// one connection, answered at once and later, each with its own answer;
// a 200 000-byte answer comes whole through flow control.
func TestGoClient(t *testing.T) {
	addr, _ := serve(t, h2.Config{MaxConcurrentStreams: 50}, echo{})
	c := goClient()
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := range 400 {
		wg.Go(func() {
			path := fmt.Sprintf("/q%d", i)
			if i%3 == 0 {
				path = "/async" + path
			}
			var req *http.Request
			want := "GET " + path + " "
			if i%2 == 0 {
				req, _ = http.NewRequest("GET", "http://"+addr+path, nil)
			} else {
				body := strings.Repeat("b", i)
				req, _ = http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
				want = "POST " + path + " " + body
			}
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != want || resp.ProtoMajor != 2 {
				errs <- fmt.Errorf("%s: %s %q, want %q", path, resp.Status, b, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	resp, err := c.Get("http://" + addr + "/big")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(b) != 200000 || resp.Header.Get("Content-Length") != "200000" {
		t.Fatalf("big answer: %d bytes, content-length %q", len(b), resp.Header.Get("Content-Length"))
	}
	resp, err = c.Post("http://"+addr+"/x", "text/plain", bytes.NewReader(make([]byte, 70000)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("70 000-byte body: %s, want 413", resp.Status)
	}
	if _, err := c.Get("http://" + addr + "/reset"); err == nil {
		t.Fatal("a reset stream answered")
	}
}

// rawClient speaks HTTP/2 frame by frame (the x/net Framer), to do what
// well-behaved clients do not.
type rawClient struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(3 * bound))
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.enc = hpack.NewEncoder(&rc.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return rc
}

func (rc *rawClient) headers(id uint32, method, path string, end bool, extra ...hpack.HeaderField) {
	rc.t.Helper()
	if err := rc.writeHeaders(id, method, path, end, extra...); err != nil {
		rc.t.Fatal(err)
	}
}

// writeHeaders is headers for a goroutine other than the test's, which
// must not call Fatal: the error is its caller's.
func (rc *rawClient) writeHeaders(id uint32, method, path string, end bool, extra ...hpack.HeaderField) error {
	return rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(rc.enc, &rc.hbuf, method, path, extra...),
		EndStream: end, EndHeaders: true})
}

// until reads frames, acknowledging SETTINGS, until want returns true;
// it fails on the connection's end.
func (rc *rawClient) until(what string, want func(http2.Frame) bool) {
	rc.t.Helper()
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			rc.t.Fatalf("waiting for %s: %v", what, err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			_ = rc.fr.WriteSettingsAck()
		}
		if want(f) {
			return
		}
	}
}

// closed reads until the server closes, returning its GOAWAY's code
// (-1: none).
func (rc *rawClient) closed() int {
	rc.t.Helper()
	code := -1
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				rc.t.Fatal("not closed")
			}
			return code
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			code = int(g.ErrCode)
		}
	}
}

// TestFlowControl: a client with a 10-byte stream window gets an answer
// 10 bytes at a time, as it opens its window; the connection window too.
func TestFlowControl(t *testing.T) {
	addr, _ := serve(t, h2.Config{}, echo{})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	rc.headers(1, "GET", "/flow-control-test", true)
	var got []byte
	ended := false
	for !ended {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = rc.fr.WriteSettingsAck()
			}
		case *http2.DataFrame:
			if len(f.Data()) > 10 {
				t.Fatalf("DATA of %d bytes over a 10-byte window", len(f.Data()))
			}
			got = append(got, f.Data()...)
			ended = f.StreamEnded()
			if !ended {
				_ = rc.fr.WriteWindowUpdate(1, uint32(len(f.Data())))
			}
		}
	}
	if string(got) != "GET /flow-control-test " {
		t.Fatalf("answer %q", got)
	}
}

// TestMaxConcurrentStreams: streams past the bound are refused
// (REFUSED_STREAM); once one ends, a new one is taken.
func TestMaxConcurrentStreams(t *testing.T) {
	addr, _ := serve(t, h2.Config{MaxConcurrentStreams: 2}, echo{})
	rc := dialRaw(t, addr)
	rc.headers(1, "GET", "/hang", true)
	rc.headers(3, "POST", "/x", false) // open: its body is to come
	rc.headers(5, "GET", "/y", true)
	rc.until("REFUSED_STREAM on 5", func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == 5 && r.ErrCode == http2.ErrCodeRefusedStream
	})
	_ = rc.fr.WriteData(3, true, []byte("body"))
	rc.until("the answer on 3", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 3 && string(d.Data()) == "POST /x body"
	})
	rc.headers(7, "GET", "/z", true)
	rc.until("the answer on 7", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 7
	})
}

// TestRapidReset: a client that opens and resets streams over and over
// (CVE-2023-44487) is sent GOAWAY ENHANCE_YOUR_CALM and closed; the
// streams it reset while their answers were being worked out kept their
// slots meanwhile.
func TestRapidReset(t *testing.T) {
	addr, _ := serve(t, h2.Config{MaxConcurrentStreams: 10, MaxResetsPerSecond: 50}, echo{})
	rc := dialRaw(t, addr)
	go func() {
		for i := range 200 {
			id := uint32(2*i + 1)
			// The server closing the connection (what is wanted) ends
			// the writes.
			if rc.writeHeaders(id, "GET", "/hang", true) != nil || rc.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	if code := rc.closed(); code != int(http2.ErrCodeEnhanceYourCalm) {
		t.Fatalf("GOAWAY %d, want ENHANCE_YOUR_CALM", code)
	}
}

// TestHeaderListTooLarge: headers over the bound get 431, and the
// connection goes on. (One field longer than the bound is a
// COMPRESSION_ERROR of the Framer's hpack decoder: the connection ends.)
func TestHeaderListTooLarge(t *testing.T) {
	addr, _ := serve(t, h2.Config{MaxHeaderListSize: 1024}, echo{})
	rc := dialRaw(t, addr)
	var big []hpack.HeaderField
	for i := range 20 {
		big = append(big, hpack.HeaderField{Name: fmt.Sprintf("x-big-%d", i), Value: strings.Repeat("a", 100)})
	}
	rc.headers(1, "GET", "/x", true, big...)
	rc.until("431", func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		return ok && h.StreamID == 1 && h.PseudoValue("status") == "431"
	})
	rc.headers(3, "GET", "/y", true)
	rc.until("the answer on 3", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 3
	})
}

// TestContinuationFlood: a header block that never ends, sent as empty
// CONTINUATION frames (which no size bound counts), ends the connection
// with ENHANCE_YOUR_CALM instead of being read for ever; a block split
// into a few frames is served.
func TestContinuationFlood(t *testing.T) {
	addr, _ := serve(t, h2.Config{}, echo{})
	rc := dialRaw(t, addr)
	rc.hbuf.Reset()
	for _, hf := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "x"}, {Name: ":path", Value: "/split"}} {
		_ = rc.enc.WriteField(hf)
	}
	block := rc.hbuf.Bytes()
	_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:2], EndStream: true})
	_ = rc.fr.WriteContinuation(1, false, block[2:4])
	_ = rc.fr.WriteContinuation(1, true, block[4:])
	rc.until("the answer on 1", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 1
	})

	rc.headers(3, "GET", "/x", true) // the encoder's table stays in step
	rc.hbuf.Reset()
	_ = rc.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: rc.hbuf.Bytes(), EndStream: true})
	for range 1000 {
		if err := rc.fr.WriteContinuation(5, false, nil); err != nil {
			break // closed by the server: what is wanted
		}
	}
	if code := rc.closed(); code != int(http2.ErrCodeEnhanceYourCalm) {
		t.Fatalf("GOAWAY code %d, want ENHANCE_YOUR_CALM", code)
	}
}

// TestMalformed: a request without :path, with a content-length its
// body does not match, or with a malformed field (upper case, a
// pseudo-field twice, late or unknown, a connection-specific field, a
// newline in a value) is reset (PROTOCOL_ERROR) and the connection goes
// on; DATA on an idle stream, or a frame over the frame size, ends it.
func TestMalformed(t *testing.T) {
	addr, _ := serve(t, h2.Config{}, echo{})
	rc := dialRaw(t, addr)
	rc.hbuf.Reset()
	_ = rc.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	_ = rc.enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "https"})
	_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	rc.until("PROTOCOL_ERROR on 1", func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == 1 && r.ErrCode == http2.ErrCodeProtocol
	})
	rc.headers(3, "POST", "/x", false, hpack.HeaderField{Name: "content-length", Value: "10"})
	_ = rc.fr.WriteData(3, true, []byte("abc"))
	rc.until("PROTOCOL_ERROR on 3", func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == 3 && r.ErrCode == http2.ErrCodeProtocol
	})
	// fields RFC 9113 §8.2 calls malformed: each stream reset, the
	// connection going on
	id := uint32(5)
	for _, bad := range [][]hpack.HeaderField{
		{{Name: "X-Upper", Value: "1"}},
		{{Name: ":path", Value: "/again"}},
		{{Name: "x-a", Value: "1"}, {Name: ":authority", Value: "late"}},
		{{Name: ":protocol", Value: "websocket"}},
		{{Name: "connection", Value: "close"}},
		{{Name: "x-v", Value: "a\nb"}},
		{{Name: "content-length", Value: "-1"}},
	} {
		rc.headers(id, "GET", "/x", true, bad...)
		rc.until(fmt.Sprintf("PROTOCOL_ERROR on %d (%v)", id, bad), func(f http2.Frame) bool {
			r, ok := f.(*http2.RSTStreamFrame)
			return ok && r.StreamID == id && r.ErrCode == http2.ErrCodeProtocol
		})
		id += 2
	}
	rc.headers(id, "GET", "/fine", true)
	rc.until("the answer after them", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == id && string(d.Data()) == "GET /fine "
	})
	_ = rc.fr.WriteData(101, true, []byte("abc"))
	if code := rc.closed(); code != int(http2.ErrCodeProtocol) {
		t.Fatalf("DATA on an idle stream: GOAWAY %d", code)
	}

	rc = dialRaw(t, addr)
	_ = rc.fr.WriteRawFrame(http2.FrameData, 0, 1, make([]byte, 20000))
	if code := rc.closed(); code != int(http2.ErrCodeFrameSize) {
		t.Fatalf("oversized frame: GOAWAY %d", code)
	}
}

// TestPingSettings: PING is echoed; a bad SETTINGS value ends the
// connection with its error.
func TestPingSettings(t *testing.T) {
	addr, _ := serve(t, h2.Config{}, echo{})
	rc := dialRaw(t, addr)
	data := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	_ = rc.fr.WritePing(false, data)
	rc.until("PING ack", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data == data
	})
	_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
	if code := rc.closed(); code != int(http2.ErrCodeFlowControl) {
		t.Fatalf("window over 2^31-1: GOAWAY %d", code)
	}
}

// TestTimeouts: a connection that sends no preface, or half of one, is
// closed after the preface timeout; one that goes quiet after its
// answers gets GOAWAY NO_ERROR after the idle timeout.
func TestTimeouts(t *testing.T) {
	addr, _ := serve(t, h2.Config{PrefaceTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}, echo{})
	for _, sent := range []string{"", "PRI * HTTP/2.0\r\n"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, sent)
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(bound))
		_, err = io.Copy(io.Discard, c)
		if err != nil || time.Since(start) > 2*time.Second {
			t.Fatalf("preface %q: %v after %v", sent, err, time.Since(start))
		}
		c.Close()
	}
	rc := dialRaw(t, addr)
	rc.headers(1, "GET", "/x", true)
	rc.until("the answer", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
	start := time.Now()
	if code := rc.closed(); code != int(http2.ErrCodeNo) || time.Since(start) > 2*time.Second {
		t.Fatalf("idle: GOAWAY %d after %v", code, time.Since(start))
	}
}

// TestSettingsAckTimeout: a client that never acknowledges our SETTINGS
// is closed with SETTINGS_TIMEOUT.
func TestSettingsAckTimeout(t *testing.T) {
	addr, _ := serve(t, h2.Config{PrefaceTimeout: 200 * time.Millisecond}, echo{})
	rc := dialRaw(t, addr)
	if code := rc.closed(); code != int(http2.ErrCodeSettingsTimeout) {
		t.Fatalf("GOAWAY %d, want SETTINGS_TIMEOUT", code)
	}
}

// TestShutdown: Shutdown sends GOAWAY, and a stream read before it is
// still answered.
func TestShutdown(t *testing.T) {
	addr, s := serve(t, h2.Config{}, echo{})
	rc := dialRaw(t, addr)
	rc.headers(1, "GET", "/x", true)
	rc.until("the answer", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
	rc.headers(3, "GET", "/async/late", true)
	time.Sleep(50 * time.Millisecond) // read by the server
	go s.Shutdown(time.Now().Add(bound))
	gotAway, answered := false, false
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			gotAway = f.ErrCode == http2.ErrCodeNo
		case *http2.DataFrame:
			answered = answered || f.StreamID == 3 && string(f.Data()) == "GET /async/late "
		}
	}
	if !gotAway || !answered {
		t.Fatalf("GOAWAY %v, answer %v", gotAway, answered)
	}
}

// TestSlowReader: a client that sends PINGs and never reads is closed
// (the output bound), not buffered for.
func TestSlowReader(t *testing.T) {
	addr, _ := serve(t, h2.Config{MaxPendingOutput: 64 << 10, IdleTimeout: 500 * time.Millisecond}, echo{})
	rc := dialRaw(t, addr)
	_ = rc.c.SetWriteDeadline(time.Now().Add(3 * bound))
	var err error
	for i := 0; i < 2_000_000 && err == nil; i++ {
		err = rc.fr.WritePing(false, [8]byte{})
	}
	if err == nil {
		t.Fatal("the server took 2 000 000 PINGs without the answers read")
	}
}
