// Package activity is what svc-pf keeps of the queries it answered: what
// was blocked, redirected or let through by an exception, for whom and by
// which rule. Its place in the data flow:
//
//	resolver (Observer) → node-side queue → batches → JetStream stream
//	ACTIVITY → collector → store (per-day SQLite files, or PostgreSQL
//	partitioned by day) → reports (GET /org/{org}/activity…, the console)
//
// This file holds the records that travel that path: Event (one query kept
// in full), Count (plain allows counted per subscriber, interval, reason and
// category) and Batch (what one node publishes as one stream message), with
// the batch's binary encoding. query.go holds what the reports ask of a
// store, config.go the `activity` configuration section.
package activity

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Event is one answered query kept in full: every decision other than a
// plain allow, and one in Config.SampleAllowed of the plain allows.
type Event struct {
	// Time is when the query was answered.
	Time time.Time `json:"time"`
	// Node is the name of the node that answered.
	Node string `json:"node"`
	// Org, SessionID, Username, DeviceID and Location are the subscriber;
	// all empty when the client's address maps to no session (the global
	// policy answered).
	Org       string `json:"org,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Username  string `json:"username,omitempty"`
	DeviceID  string `json:"deviceid,omitempty"`
	Location  string `json:"location,omitempty"`
	// Client is the client's address as Config.ClientIP keeps it: the
	// address ("192.0.2.7"), its network ("192.0.2.0/24", "2001:db8::/48"),
	// a keyed hash ("h:" and 16 hex digits), or "".
	Client string `json:"client,omitempty"`
	// QName is the question's name, lower case, with its final dot; QType
	// its type.
	QName string `json:"qname"`
	QType uint16 `json:"qtype"`
	// Transport is udp, tcp, dot, doh or doq.
	Transport string `json:"transport"`
	// Verdict, Action, Reason and Rule are the decision's (docs/policy.md);
	// Categories the category codes it found for the name.
	Verdict    string   `json:"verdict"`
	Action     string   `json:"action"`
	Reason     string   `json:"reason"`
	Rule       string   `json:"rule,omitempty"`
	Categories []uint16 `json:"categories,omitempty"`
	// Rcode is the reply's rcode; -1 when the query was dropped.
	Rcode int `json:"rcode"`
	// Cached is "packet", "record" or "" (resolver.Cached).
	Cached string `json:"cached,omitempty"`
	// LatencyUS is the time from the query's arrival to its reply, in
	// microseconds.
	LatencyUS uint32 `json:"latency_us"`
	// Policy is the fingerprint of the effective settings that decided.
	Policy string `json:"policy,omitempty"`
	// Sampled marks a plain allow kept as a sample: it stands for about
	// Config.SampleAllowed plain allows, all of which Counts count.
	Sampled bool `json:"sampled,omitempty"`
}

// Count counts the plain allows of one subscriber, interval, reason and
// category. A plain allow is counted once, under its first category (0:
// none), so that counts add up across categories.
type Count struct {
	// Start is the interval's start; Seconds its length.
	Start   time.Time
	Seconds uint32
	// The subscriber, as in Event; all empty for the global policy.
	Org, SessionID, Username, DeviceID, Location string
	Reason                                       string
	Category                                     uint16
	N                                            uint64
}

// Batch is what a node publishes as one message of the ACTIVITY stream.
// (Node, Boot, Seq) names it: a store keeps a batch once however often it
// arrives (a publish retried after a lost acknowledgement, a message
// redelivered after a collector died before acknowledging it).
type Batch struct {
	Node string
	// Boot is chosen at random when the node's process starts, so that
	// Seq, which counts from 1 in each process, never names two batches.
	Boot   uint64
	Seq    uint64
	Events []Event
	Counts []Count
}

// ID is the batch's name: "node/boot/seq", the stream message's
// Nats-Msg-Id.
func (b *Batch) ID() string {
	return b.Node + "/" + strconv.FormatUint(b.Boot, 16) + "/" + strconv.FormatUint(b.Seq, 10)
}

// Limits of a batch, enforced by AppendBatch's reader (ParseBatch): a
// message from the stream is input like any other.
const (
	MaxBatchEvents = 1 << 16
	MaxBatchCounts = 1 << 16
	MaxStringLen   = 1024 // a DNS name is 254 bytes at most; a rule quotes one
	MaxCategories  = 255
)

// The fewest bytes an encoded event and count take (every field empty or
// zero), which bounds what a batch's counts may claim before allocating.
const (
	minEventLen = 21
	minCountLen = 10
)

// batchMagic starts every encoded batch; its last byte is the format's
// version.
var batchMagic = [4]byte{'S', 'P', 'A', 1}

// AppendBatch appends b's encoding to dst: the magic, the node, boot and
// seq, then the events and the counts, each a count followed by its
// records. Integers are varints, strings a length and their bytes, times
// Unix nanoseconds. Strings longer than MaxStringLen are cut, categories
// beyond MaxCategories left out: a batch always reads back.
func AppendBatch(dst []byte, b *Batch) []byte {
	dst = appendBatchHead(dst, b, len(b.Events))
	for i := range b.Events {
		dst = appendEvent(dst, &b.Events[i])
	}
	return appendBatchCounts(dst, b)
}

// AppendBatchEncoded is AppendBatch for a batch whose n events were
// encoded already, one after another, by AppendEvent (events); b.Events
// is not read. A node encodes each event as it is answered, into memory
// it reuses, rather than keeping it as an Event.
func AppendBatchEncoded(dst []byte, b *Batch, n int, events []byte) []byte {
	dst = appendBatchHead(dst, b, n)
	dst = append(dst, events...)
	return appendBatchCounts(dst, b)
}

// AppendEvent appends one event's encoding, as a batch holds it (see
// AppendBatchEncoded).
func AppendEvent(dst []byte, e *Event) []byte { return appendEvent(dst, e) }

func appendBatchHead(dst []byte, b *Batch, events int) []byte {
	dst = append(dst, batchMagic[:]...)
	dst = appendString(dst, b.Node)
	dst = binary.AppendUvarint(dst, b.Boot)
	dst = binary.AppendUvarint(dst, b.Seq)
	return binary.AppendUvarint(dst, uint64(events))
}

func appendBatchCounts(dst []byte, b *Batch) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b.Counts)))
	for i := range b.Counts {
		c := &b.Counts[i]
		dst = binary.AppendVarint(dst, c.Start.UnixNano())
		dst = binary.AppendUvarint(dst, uint64(c.Seconds))
		for _, s := range [...]string{c.Org, c.SessionID, c.Username, c.DeviceID, c.Location, c.Reason} {
			dst = appendString(dst, s)
		}
		dst = binary.AppendUvarint(dst, uint64(c.Category))
		dst = binary.AppendUvarint(dst, c.N)
	}
	return dst
}

// AppendEvent appends one event's encoding (as inside a batch).
func appendEvent(dst []byte, e *Event) []byte {
	dst = binary.AppendVarint(dst, e.Time.UnixNano())
	for _, s := range [...]string{e.Node, e.Org, e.SessionID, e.Username, e.DeviceID, e.Location, e.Client, e.QName} {
		dst = appendString(dst, s)
	}
	dst = binary.AppendUvarint(dst, uint64(e.QType))
	for _, s := range [...]string{e.Transport, e.Verdict, e.Action, e.Reason, e.Rule} {
		dst = appendString(dst, s)
	}
	cats := e.Categories[:min(len(e.Categories), MaxCategories)]
	dst = binary.AppendUvarint(dst, uint64(len(cats)))
	for _, c := range cats {
		dst = binary.AppendUvarint(dst, uint64(c))
	}
	dst = binary.AppendVarint(dst, int64(e.Rcode))
	dst = appendString(dst, e.Cached)
	dst = binary.AppendUvarint(dst, uint64(e.LatencyUS))
	dst = appendString(dst, e.Policy)
	if e.Sampled {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func appendString(dst []byte, s string) []byte {
	s = s[:min(len(s), MaxStringLen)]
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// ErrBadBatch is what ParseBatch returns for bytes that are not a batch.
var ErrBadBatch = errors.New("activity: not a batch")

// ParseBatch reads a batch AppendBatch wrote. Anything else — another
// version, a cut or padded message, a record over the limits — is
// ErrBadBatch (wrapped, saying where), never a panic.
func ParseBatch(data []byte) (Batch, error) {
	r := reader{b: data}
	var b Batch
	if len(data) < len(batchMagic) || [4]byte(data[:4]) != batchMagic {
		return b, fmt.Errorf("%w: no magic (or another version)", ErrBadBatch)
	}
	r.b = data[4:]
	b.Node = r.string()
	b.Boot, b.Seq = r.uvarint(), r.uvarint()
	n := r.count(MaxBatchEvents)
	if n*minEventLen > len(r.b) {
		r.fail("more events than bytes") // before allocating them
	}
	if n > 0 && r.err == nil {
		b.Events = make([]Event, n)
	}
	for i := range b.Events {
		e := &b.Events[i]
		e.Time = time.Unix(0, r.varint()).UTC()
		e.Node, e.Org, e.SessionID, e.Username = r.string(), r.string(), r.string(), r.string()
		e.DeviceID, e.Location, e.Client, e.QName = r.string(), r.string(), r.string(), r.string()
		e.QType = r.uint16()
		e.Transport, e.Verdict, e.Action, e.Reason, e.Rule = r.string(), r.string(), r.string(), r.string(), r.string()
		if nc := r.count(MaxCategories); nc > 0 {
			e.Categories = make([]uint16, nc)
			for j := range e.Categories {
				e.Categories[j] = r.uint16()
			}
		}
		rc := r.varint()
		if rc < -1 || rc > 0xfff {
			r.fail("rcode out of range")
		}
		e.Rcode = int(rc)
		e.Cached = r.string()
		lat := r.uvarint()
		if lat > 1<<32-1 {
			r.fail("latency out of range")
		}
		e.LatencyUS = uint32(lat)
		e.Policy = r.string()
		switch r.byte() {
		case 0:
		case 1:
			e.Sampled = true
		default:
			r.fail("bad sampled flag")
		}
		if r.err != nil {
			break
		}
	}
	n = r.count(MaxBatchCounts)
	if n*minCountLen > len(r.b) {
		r.fail("more counts than bytes")
	}
	if n > 0 && r.err == nil {
		b.Counts = make([]Count, n)
	}
	for i := range b.Counts {
		c := &b.Counts[i]
		c.Start = time.Unix(0, r.varint()).UTC()
		sec := r.uvarint()
		if sec > 1<<32-1 {
			r.fail("interval out of range")
		}
		c.Seconds = uint32(sec)
		c.Org, c.SessionID, c.Username, c.DeviceID, c.Location, c.Reason = r.string(), r.string(), r.string(), r.string(), r.string(), r.string()
		c.Category = r.uint16()
		c.N = r.uvarint()
		if r.err != nil {
			break
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return Batch{}, r.err
	}
	return b, nil
}

// reader reads a batch's fields; the first failure sticks and every later
// read returns zero.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrBadBatch, what)
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uint16() uint16 {
	v := r.uvarint()
	if v > 0xffff {
		r.fail("value over 16 bits")
		return 0
	}
	return uint16(v)
}

func (r *reader) count(max int) int {
	v := r.uvarint()
	if v > uint64(max) {
		r.fail("count over its limit")
		return 0
	}
	return int(v)
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("cut short")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) string() string {
	n := r.count(MaxStringLen)
	if r.err != nil {
		return ""
	}
	if len(r.b) < n {
		r.fail("cut short")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
