package dnstap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame Streams is dnstap's transport: a stream of frames, each a 32-bit
// big-endian length and that many bytes. A length of zero escapes a
// control frame: its own 32-bit length, then a 32-bit control type and
// fields, each a 32-bit field type, a 32-bit length and its bytes. The
// only field is the content type.
//
// On a socket the handshake is bidirectional: the writer (we) sends READY
// naming the content types it can write; the reader answers ACCEPT naming
// the one it takes; the writer sends START with it, then data frames, one
// dnstap message each. To end, the writer sends STOP and the reader
// answers FINISH before both close.
const (
	ctrlAccept uint32 = 0x01
	ctrlStart  uint32 = 0x02
	ctrlStop   uint32 = 0x03
	ctrlReady  uint32 = 0x04
	ctrlFinish uint32 = 0x05

	fieldContentType uint32 = 0x01

	// maxControl bounds a control frame's length (the protocol's own
	// limit): a peer sending more is not a Frame Streams reader.
	maxControl = 512
)

// contentType is dnstap's Frame Streams content type.
const contentType = "protobuf:dnstap.Dnstap"

// appendControl appends a control frame of type typ, with the content
// type when ct is not empty (STOP carries none).
func appendControl(dst []byte, typ uint32, ct string) []byte {
	n := 4
	if ct != "" {
		n += 8 + len(ct)
	}
	dst = binary.BigEndian.AppendUint32(dst, 0) // the escape
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = binary.BigEndian.AppendUint32(dst, typ)
	if ct != "" {
		dst = binary.BigEndian.AppendUint32(dst, fieldContentType)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(ct)))
		dst = append(dst, ct...)
	}
	return dst
}

// control is a control frame as read.
type control struct {
	typ          uint32
	contentTypes [][]byte // views of the frame
}

// has says whether the frame names content type ct.
func (c *control) has(ct string) bool {
	for _, t := range c.contentTypes {
		if string(t) == ct {
			return true
		}
	}
	return false
}

// parseControl reads a control frame's body (after its length): its type
// and fields. Fields of unknown types are skipped, as the protocol asks.
func parseControl(b []byte) (control, error) {
	var c control
	if len(b) < 4 {
		return c, errors.New("control frame shorter than its type")
	}
	c.typ = binary.BigEndian.Uint32(b)
	for b = b[4:]; len(b) > 0; {
		if len(b) < 8 {
			return c, errors.New("control frame: truncated field header")
		}
		ft, fl := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
		b = b[8:]
		if uint64(fl) > uint64(len(b)) {
			return c, fmt.Errorf("control frame: field of %d bytes, %d left", fl, len(b))
		}
		if ft == fieldContentType {
			c.contentTypes = append(c.contentTypes, b[:fl])
		}
		b = b[fl:]
	}
	return c, nil
}

// readControl reads one frame from r, which must be a control frame: a
// reader sends nothing else.
func readControl(r io.Reader) (control, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return control{}, err
	}
	if n := binary.BigEndian.Uint32(hdr[:4]); n != 0 {
		return control{}, fmt.Errorf("the reader sent a data frame of %d bytes where a control frame was due", n)
	}
	if _, err := io.ReadFull(r, hdr[4:]); err != nil {
		return control{}, err
	}
	n := binary.BigEndian.Uint32(hdr[4:])
	if n > maxControl {
		return control{}, fmt.Errorf("the reader sent a control frame of %d bytes (at most %d)", n, maxControl)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return control{}, err
	}
	return parseControl(buf)
}

// handshake does the writer's side of the bidirectional handshake on rw:
// READY, the reader's ACCEPT, START.
func handshake(rw io.ReadWriter) error {
	if _, err := rw.Write(appendControl(nil, ctrlReady, contentType)); err != nil {
		return fmt.Errorf("send READY: %w", err)
	}
	c, err := readControl(rw)
	if err != nil {
		return fmt.Errorf("read the reader's ACCEPT: %w", err)
	}
	if c.typ != ctrlAccept {
		return fmt.Errorf("the reader answered READY with control frame type %d, not ACCEPT", c.typ)
	}
	if !c.has(contentType) {
		var names [][]byte
		names = append(names, c.contentTypes...)
		return fmt.Errorf("the reader accepts %q, not %q: is it a dnstap reader?", bytes.Join(names, []byte(", ")), contentType)
	}
	if _, err := rw.Write(appendControl(nil, ctrlStart, contentType)); err != nil {
		return fmt.Errorf("send START: %w", err)
	}
	return nil
}
