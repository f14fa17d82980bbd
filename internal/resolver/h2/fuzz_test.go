package h2_test

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/svc-pf/svc-pf/internal/resolver/h2"
)

// frames is a client's frames after the preface, written with the
// Framer.
func frames(write func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer)) []byte {
	var b, hb bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	write(fr, hpack.NewEncoder(&hb), &hb)
	return b.Bytes()
}

// block is a request's header block (the pseudo-fields, then extra),
// encoded with enc into hb and copied out.
func block(enc *hpack.Encoder, hb *bytes.Buffer, method, path string, extra ...hpack.HeaderField) []byte {
	hb.Reset()
	for _, hf := range append([]hpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "x"}, {Name: ":path", Value: path}}, extra...) {
		_ = enc.WriteField(hf)
	}
	return append([]byte(nil), hb.Bytes()...)
}

// FuzzH2Conn: whatever bytes follow the client preface and SETTINGS,
// the server neither panics nor hangs: once the client stops, the
// connection ends within its timeouts.
func FuzzH2Conn(f *testing.F) {
	f.Add(frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(enc, hb, "GET", "/q"), EndStream: true, EndHeaders: true})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(enc, hb, "POST", "/async/p",
			hpack.HeaderField{Name: "content-length", Value: "4"}), EndHeaders: true})
		_ = fr.WriteData(3, true, []byte("body"))
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteSettingsAck()
		_ = fr.WriteWindowUpdate(0, 1000)
		_ = fr.WriteWindowUpdate(1, 1000)
		_ = fr.WritePriority(5, http2.PriorityParam{StreamDep: 1, Weight: 3})
		_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	}))
	f.Add(frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		b := block(enc, hb, "GET", "/big")
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 3},
			http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16384}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:2], EndStream: true})
		_ = fr.WriteContinuation(1, true, b[2:])
		_ = fr.WriteWindowUpdate(1, 100)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(enc, hb, "GET", "/reset"), EndStream: true, EndHeaders: true})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: block(enc, hb, "PUT", "/hang"), EndHeaders: true})
		_ = fr.WriteData(5, false, make([]byte, 100))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: block(enc, hb, "X", "/t"), EndStream: true, EndHeaders: true})
	}))
	f.Add([]byte{0, 0, 0, 4, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		s := h2.NewServer(h2.Config{MaxConcurrentStreams: 4, MaxBodySize: 1000, IdleTimeout: 100 * time.Millisecond,
			PrefaceTimeout: 100 * time.Millisecond, MaxPendingOutput: 1 << 20})
		cli, srv := net.Pipe()
		done := make(chan struct{})
		go func() {
			s.ServeConn(srv, quick{})
			close(done)
		}()
		go func() { _, _ = io.Copy(io.Discard, cli) }()
		go func() {
			var b bytes.Buffer
			b.WriteString(http2.ClientPreface)
			_ = http2.NewFramer(&b, nil).WriteSettings()
			b.Write(in)
			_, _ = cli.Write(b.Bytes())
			_ = cli.Close() // the client is done: EOF
		}()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatal("the connection did not end")
		}
		s.Shutdown(time.Now())
	})
}

// quick is echo without /hang's second: a fuzz input's connection ends
// as soon as its input does.
type quick struct{}

func (quick) ServeH2(s *h2.Stream, req *h2.Request) {
	if req.Path == "/hang" {
		s.Respond(204, nil, nil)
		return
	}
	echo{}.ServeH2(s, req)
}
