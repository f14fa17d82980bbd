// Package sessionsnap is the snapshot of the sessions bucket that lets a
// node start without replaying the bucket's whole stream.
//
// Data flow: the IP Mapper (internal/ipmapper) periodically writes, into a
// NATS Object Store bucket named like the sessions KV bucket, one object
// holding every session of its table as the bucket stores it, with the KV
// stream sequence the table covers; a node's sessions read model
// (internal/readmodel/sessions) starts from the newest snapshot and then
// replays only the stream after that sequence (deletes included). Without
// a usable snapshot it replays the whole stream, as before. See
// docs/subscriber-index.md and docs/ipmapper.md.
//
// The object is a header line and then one record per session, key and
// value length-prefixed (uvarint), the value the exact bytes the bucket
// stores under the key; a zero-length key and the record count end it, so
// a truncated object is refused rather than taken for a smaller table.
// Records are in an order that gives every node the same answers as a
// replay of the stream (see Writer).
package sessionsnap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// magic starts every snapshot; the version changes with the format.
const magic = "svc-pf sessions snapshot 1\n"

// Bounds a reader holds records to: a key is a session id (at most 128
// characters), and a value is one NATS message (the server's max_payload
// is at most 64 MiB).
const (
	maxKey   = 1024
	maxValue = 64 << 20
)

// Writer writes a snapshot's records. The caller adds them in the order a
// node must apply them (a session after every older holder of the same
// prefix) and calls Close.
type Writer struct {
	w   *bufio.Writer
	n   uint64
	hdr [2 * binary.MaxVarintLen64]byte
	err error
}

// NewWriter starts a snapshot on w.
func NewWriter(w io.Writer) *Writer {
	bw := bufio.NewWriterSize(w, 256<<10)
	_, err := bw.WriteString(magic)
	return &Writer{w: bw, err: err}
}

// Add writes one record: the bucket's value under key.
func (w *Writer) Add(key string, value []byte) error {
	if w.err != nil {
		return w.err
	}
	if key == "" || len(key) > maxKey || len(value) > maxValue {
		w.err = fmt.Errorf("sessionsnap: record %q: key of 1 to %d bytes and value of at most %d bytes", key, maxKey, maxValue)
		return w.err
	}
	// A bufio.Writer keeps its first error and refuses every later write
	// with it: the last write's error is the record's.
	_, _ = w.w.Write(binary.AppendUvarint(w.hdr[:0], uint64(len(key))))
	_, _ = w.w.WriteString(key)
	_, _ = w.w.Write(binary.AppendUvarint(w.hdr[:0], uint64(len(value))))
	if _, w.err = w.w.Write(value); w.err != nil {
		return w.err
	}
	w.n++
	return nil
}

// Count is how many records were added.
func (w *Writer) Count() uint64 { return w.n }

// Close writes the end of the snapshot and flushes it; it does not close
// the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	h := binary.AppendUvarint(w.hdr[:0], 0)
	h = binary.AppendUvarint(h, w.n)
	if _, w.err = w.w.Write(h); w.err != nil {
		return w.err
	}
	w.err = w.w.Flush()
	if w.err == nil {
		w.err = errors.New("sessionsnap: writer closed")
		return nil
	}
	return w.err
}

// ErrFormat is wrapped by every error about a snapshot's bytes.
var ErrFormat = errors.New("sessionsnap: not a valid snapshot")

// Reader reads a snapshot's records.
type Reader struct {
	r    *bufio.Reader
	n    uint64
	done bool
	key  [maxKey]byte
	// slab is where values are cut from: one allocation for many records
	// (a node reads millions), each value a full slice expression so that
	// no append to it reaches the next.
	slab []byte
}

// slabSize is the size of one slab of values.
const slabSize = 1 << 20

// NewReader checks the snapshot's header.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	head := make([]byte, len(magic))
	if _, err := io.ReadFull(br, head); err != nil {
		return nil, formatErr("header", err)
	}
	if string(head) != magic {
		return nil, fmt.Errorf("%w: unknown header %q", ErrFormat, head)
	}
	return &Reader{r: br}, nil
}

func formatErr(what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %s: %w", ErrFormat, what, err)
}

// Next returns the next record. The value is the caller's to keep (it is
// not reused). At the snapshot's end it returns io.EOF, and only after the
// end record was read and the count it holds matched: a snapshot cut short
// is an error, never a smaller table.
func (r *Reader) Next() (key string, value []byte, err error) {
	if r.done {
		return "", nil, io.EOF
	}
	kl, err := binary.ReadUvarint(r.r)
	if err != nil {
		return "", nil, formatErr("record", err)
	}
	if kl == 0 {
		n, err := binary.ReadUvarint(r.r)
		if err != nil {
			return "", nil, formatErr("end record", err)
		}
		if n != r.n {
			return "", nil, fmt.Errorf("%w: it says %d records, it holds %d", ErrFormat, n, r.n)
		}
		if _, err := r.r.ReadByte(); err != io.EOF {
			return "", nil, fmt.Errorf("%w: bytes after the end record", ErrFormat)
		}
		r.done = true
		return "", nil, io.EOF
	}
	if kl > maxKey {
		return "", nil, fmt.Errorf("%w: key of %d bytes", ErrFormat, kl)
	}
	kb := r.key[:kl]
	if _, err := io.ReadFull(r.r, kb); err != nil {
		return "", nil, formatErr("key", err)
	}
	vl, err := binary.ReadUvarint(r.r)
	if err != nil {
		return "", nil, formatErr("value length", err)
	}
	if vl > maxValue {
		return "", nil, fmt.Errorf("%w: value of %d bytes", ErrFormat, vl)
	}
	value = r.take(int(vl))
	if _, err := io.ReadFull(r.r, value); err != nil {
		return "", nil, formatErr("value", err)
	}
	r.n++
	return string(kb), value, nil
}

// take cuts n bytes off the slab.
func (r *Reader) take(n int) []byte {
	if n > slabSize/4 {
		return make([]byte, n)
	}
	if len(r.slab) < n {
		r.slab = make([]byte, slabSize)
	}
	b := r.slab[:n:n]
	r.slab = r.slab[n:]
	return b
}
