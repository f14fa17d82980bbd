package orgmanager

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestBatchBodyCapFitsTheLargestBatch: the batch cap is computed from the
// item limits, so a full batch of the largest legal items, as encoding/json
// writes them, is under it; every other endpoint keeps the smaller cap.
func TestBatchBodyCapFitsTheLargestBatch(t *testing.T) {
	meta := `{"k":"` + strings.Repeat("m", orgstore.MaxMetaLen-8) + `"}`
	item := map[string]any{
		"cidr": "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120",
		// encoding/json escapes '<' as \u003c: six bytes per byte.
		"username": strings.Repeat("<", identity.MaxAttributeLen),
		"deviceid": strings.Repeat("<", identity.MaxAttributeLen),
		"location": strings.Repeat("<", identity.MaxAttributeLen),
		"meta":     json.RawMessage(meta),
		"delete":   false,
		"_status":  "outside-prefixes",
		"_mtime":   "2025-01-02T03:04:05.123456Z",
		"_ctime":   "2025-01-02T03:04:05.123456Z",
	}
	raw, err := json.Marshal(item)
	if err != nil {
		t.Fatal(err)
	}
	// It is legal: the limits are exactly reached, not exceeded.
	in, err := decodeItem(raw)
	if err != nil {
		t.Fatal(err)
	}
	o, err := in.toOverride()
	if err != nil || len(o.Meta) != orgstore.MaxMetaLen || len(o.Username) != identity.MaxAttributeLen {
		t.Fatalf("largest item refused: %v (meta %d bytes)", err, len(o.Meta))
	}
	if len(raw) > maxItemBytes {
		t.Fatalf("largest legal item is %d bytes, maxItemBytes %d", len(raw), maxItemBytes)
	}
	batch := int64(len(`{"data":[]}`) + maxBatchItems*(len(raw)+1))
	if batch > maxBatchBody {
		t.Fatalf("largest legal batch is %d bytes, the cap %d", batch, maxBatchBody)
	}
	if maxBody >= maxBatchBody || maxItemBytes > maxBody {
		t.Fatalf("maxBody %d: must hold one item (%d) and stay under the batch cap %d", maxBody, maxItemBytes, maxBatchBody)
	}
}

// TestBodyCaps sends bodies around the caps. The caps do not depend on the
// database, so SQLite alone serves.
func TestBodyCaps(t *testing.T) {
	h := newHarness(t, storetest.Open(t, storetest.SQLite), deploy.Discard{})
	h.org("acme", "10.0.0.0/8")

	// A legal batch over the 32 MiB every other endpoint allows: 2 100
	// items with 16 KiB of meta each, streamed (chunked) as generated.
	const n = 2100
	pad := strings.Repeat("m", orgstore.MaxMetaLen-16)
	body := &itemStream{n: n, item: func(i int) string {
		return fmt.Sprintf(`{"cidr":"10.%d.%d.0/24","meta":{"x-pad":"%s"}}`, i/256, i%256, pad)
	}}
	r := h.must(200, "POST", "/org/acme/overrides/batch", body)
	if body.sent <= maxBody {
		t.Fatalf("sent only %d bytes", body.sent)
	}
	var br batchResponse
	r.decode(t, &br)
	if !br.Success || br.Processed != n {
		t.Fatalf("batch of %d bytes: %s", body.sent, r.body)
	}

	// A declared length over the cap is refused before the body is read:
	// the test sends none of it.
	for _, c := range []struct {
		path   string
		length int64
	}{
		{"/org/acme/overrides/batch", maxBatchBody + 1},
		{"/org/acme/overrides", maxBody + 1},
		{"/org/acme/prefixes", maxBody + 1},
	} {
		method := "POST"
		if strings.HasSuffix(c.path, "/prefixes") {
			method = "PATCH"
		}
		status, hdr, data := h.declareLength(method, c.path, c.length)
		var e map[string]string
		if status != http.StatusRequestEntityTooLarge || hdr.Get("Content-Type") != "application/json" ||
			hdr.Get("X-Request-ID") == "" || json.Unmarshal(data, &e) != nil ||
			e["error"] != fmt.Sprintf("request body larger than %d bytes", c.length-1) {
			t.Errorf("%s %s with Content-Length %d: %d %q %s", method, c.path, c.length, status, hdr, data)
		}
	}
}

// declareLength sends a request head declaring a body of length bytes, and
// only 9 of them, then reads the answer.
func (h *harness) declareLength(method, path string, length int64) (int, http.Header, []byte) {
	h.t.Helper()
	conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		h.t.Fatal(err)
	}
	_, err = fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"data\":[", method, path, h.token, length)
	if err != nil {
		h.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// itemStream generates {"data":[item(0),…,item(n-1)]} as it is read, so a
// large body costs the test no memory.
type itemStream struct {
	n, next int
	item    func(i int) string
	buf     []byte
	done    bool
	sent    int64
}

func (s *itemStream) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		switch {
		case s.done:
			return 0, io.EOF
		case s.next == 0 && s.n > 0:
			s.buf = append(s.buf, `{"data":[`...)
			s.buf = append(s.buf, s.item(0)...)
			s.next = 1
		case s.next < s.n:
			s.buf = append(append(s.buf, ','), s.item(s.next)...)
			s.next++
		default:
			if s.n == 0 {
				s.buf = append(s.buf, `{"data":[`...)
			}
			s.buf = append(s.buf, "]}"...)
			s.done = true
		}
	}
	c := copy(p, s.buf)
	s.buf = s.buf[c:]
	s.sent += int64(c)
	return c, nil
}
