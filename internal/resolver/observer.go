package resolver

import (
	"encoding/binary"
	"net/netip"
	"time"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// Observer is told of every query the resolver answered, from every
// transport, whether the reply came from a cache or not (Config.Observer;
// nil: none, and nothing of this is computed).
//
// Answered is called synchronously, on the goroutine that answered the
// query (for a packet-cache hit, the UDP socket's reader, which answers
// every other client of that socket), after the reply was handed to the
// transport. It must be cheap and must never block: a consumer that does
// more (a log, a queue to a store) copies what it needs into its own
// bounded queue and drops, and counts, what does not fit. It is called
// from many goroutines at once.
//
// a and everything it references are valid only during the call: the
// event is reused for the next query, and its strings may be views into
// memory the resolver reuses (Name is a view of the reader's buffer,
// rewritten by its next query). Copy what you keep (strings.Clone,
// slices.Clone).
type Observer interface {
	Answered(a *Answered)
}

// Observers tells each of its observers, in order (the activity queue,
// dnstap): a resolver has one Observer.
type Observers []Observer

// Answered calls every observer.
func (os Observers) Answered(a *Answered) {
	for _, o := range os {
		o.Answered(a)
	}
}

// Answered is one answered query, as an Observer sees it.
type Answered struct {
	// Name is the question's name in lower case, dotted, with its final
	// dot ("example.com."); Type its type. Both empty when the packet
	// had no question (a FORMERR for a malformed header).
	Name string
	Type uint16
	// Subscriber is the session the client's address maps to; zero when
	// it has none (the global policy answered).
	Subscriber Subscriber
	// Transport is how the query came; Client its source address;
	// ClientID the client id of an encrypted transport ("" for UDP and
	// TCP: the source address identifies the subscriber).
	Transport policy.Transport
	Client    netip.AddrPort
	ClientID  string
	// Decision is the policy's decision that shaped the reply; zero
	// (Verdict "") when none was made: a FORMERR, NOTIMP or BADVERS, a
	// CHAOS or non-IN class, a query refused for capacity.
	Decision Summary
	// Rcode is the reply's rcode (BADVERS is 16); RcodeDropped when the
	// policy's action was to drop the query: no reply was sent, but a
	// decision was made.
	Rcode int
	// Cached says whether a cache answered: the packet cache (the whole
	// reply, and Decision is the one stored with it), or the record cache
	// (the forwarders' answer; the decision was made again).
	Cached Cached
	// At is when the reply was made, to be handed to the transport (for
	// RcodeDropped, when the query was dropped): the resolver reads the
	// clock once per observed query and both At and Took come from that
	// reading, so that an observer needing the time (the activity event's,
	// dnstap's) need not read it again. Zero only from a caller that does
	// not set it (an observer's own tests): an observer then reads its own
	// clock.
	At time.Time
	// Took is from the query's arrival (its batch's, over UDP) to At.
	Took time.Duration
	// Reply is the reply's wire bytes as handed to the transport (a view
	// of the resolver's buffer: copy what you keep); nil when none was
	// sent (RcodeDropped).
	Reply []byte
}

// RcodeDropped is Answered.Rcode for a query the policy dropped.
const RcodeDropped = -1

// Cached names the cache an answer came from.
type Cached uint8

// Caches.
const (
	CachedNone Cached = iota
	CachedPacket
	CachedRecord
)

// String is "", "packet" or "record".
func (c Cached) String() string {
	switch c {
	case CachedPacket:
		return "packet"
	case CachedRecord:
		return "record"
	}
	return ""
}

// Subscriber is who asked: the session's organisation, id and attributes.
type Subscriber struct {
	Org, SessionID, Username, DeviceID, Location string
	// Handle is the session's slot in the subscriber index + 1 (0: none
	// known). Small and dense, the same for a session while it lives, but
	// reused for another session after a delete and renumbered when the
	// index is rebuilt: an observer may keep per-subscriber state in an
	// array by it (activity's counts do), provided it checks that the
	// strings are still those it saw there.
	Handle uint32
}

// Summary is a decision as the observer sees it, and as the packet cache
// keeps it beside an answer.
type Summary struct {
	Verdict policy.Verdict
	Action  policy.Action
	Reason  policy.Reason
	// Rule is the rule that fired (policy.Decision.Rule), "" for the
	// default.
	Rule string
	// Categories are the codes (feed.Category.Code) of the categories
	// found for the name, in the decision's order (a name of the CNAME
	// chain adds its own); empty when the decision did not look them up.
	Categories []uint16
	// Policy is the fingerprint of the effective settings that decided
	// (policy.Decision.Fingerprint): a later question "why was this
	// blocked then?" tells an old policy from today's by it.
	Policy string
}

// summarize fills s from d, its categories into s.Categories' room.
func summarize(s *Summary, d *policy.Decision) {
	cats := s.Categories[:0]
	for _, c := range d.Categories {
		cats = append(cats, c.Code)
	}
	*s = Summary{Verdict: d.Verdict, Action: d.Action, Reason: d.Reason, Rule: d.Rule(), Categories: cats,
		Policy: d.Fingerprint}
}

// The packet cache keeps a summary as a note (cache.Packet.Put): one byte
// each for the verdict, action and reason (their index in these tables),
// the number of categories, their codes (big-endian), the policy's
// fingerprint as a length byte and its bytes, then the rule's bytes. A few bytes beside an answer of a hundred or more; decoded, on a
// hit, without allocating (the rule is a view of the entry's bytes, which
// are never modified).
var (
	// The verdict's and reason's indices are those of
	// svcpf_resolver_decisions_total (stats.Decided), which a hit counts
	// from the note's first bytes.
	noteVerdicts = stats.Verdicts
	noteActions  = [...]policy.Action{"", policy.ActionAllow, policy.ActionNXDomain, policy.ActionNoData,
		policy.ActionRefused, policy.ActionDrop, policy.ActionTruncate, policy.ActionRedirect, policy.ActionCNAME}
	noteReasons = stats.Reasons
)

// noteHead is a decision's verdict, action and reason as indices of the
// note's tables: what the packet cache keeps beside an answer when there
// is no observer (svcpf_resolver_decisions_total counts the hits by it).
type noteHead [3]byte

func headOf(d *policy.Decision) noteHead {
	return noteHead{indexOf(noteVerdicts[:], d.Verdict), indexOf(noteActions[:], d.Action), indexOf(noteReasons[:], d.Reason)}
}

// appendHeadNote appends the note of a decision known only by its head:
// no categories, fingerprint or rule.
func appendHeadNote(dst []byte, h noteHead) []byte {
	return append(dst, h[0], h[1], h[2], 0, 0)
}

// countNote counts a packet-cache hit's decision from its note (nothing
// when the answer was stored without one).
func countNote(sh *stats.Shard, note []byte) {
	if len(note) >= 4 {
		sh.Decided(note[0], note[2])
	}
}

// noteMaxCategories bounds the codes a note keeps (a count byte), and
// noteMaxPolicy the fingerprint's bytes (16 hex digits in practice).
const (
	noteMaxCategories = 255
	noteMaxPolicy     = 255
)

func indexOf[T comparable](table []T, v T) byte {
	for i, x := range table {
		if x == v {
			return byte(i)
		}
	}
	return 0
}

// appendNote appends s's note to dst.
func appendNote(dst []byte, s *Summary) []byte {
	cats := s.Categories[:min(len(s.Categories), noteMaxCategories)]
	dst = append(dst, indexOf(noteVerdicts[:], s.Verdict), indexOf(noteActions[:], s.Action),
		indexOf(noteReasons[:], s.Reason), byte(len(cats)))
	for _, c := range cats {
		dst = binary.BigEndian.AppendUint16(dst, c)
	}
	fp := s.Policy[:min(len(s.Policy), noteMaxPolicy)]
	dst = append(dst, byte(len(fp)))
	dst = append(dst, fp...)
	return append(dst, s.Rule...)
}

// readNote decodes a note appendNote wrote into s, its categories into
// cats (reused); false when note is not one (an answer stored without a
// summary: s is then zero). The rule and the policy are views of note.
func readNote(s *Summary, note []byte, cats []uint16) bool {
	*s = Summary{}
	if len(note) < 4 {
		return false
	}
	v, a, r, n := int(note[0]), int(note[1]), int(note[2]), int(note[3])
	if v >= len(noteVerdicts) || a >= len(noteActions) || r >= len(noteReasons) || len(note) < 5+2*n ||
		len(note) < 5+2*n+int(note[4+2*n]) {
		return false
	}
	for i := range n {
		cats = append(cats, binary.BigEndian.Uint16(note[4+2*i:]))
	}
	*s = Summary{Verdict: noteVerdicts[v], Action: noteActions[a], Reason: noteReasons[r], Categories: cats}
	fp := note[5+2*n : 5+2*n+int(note[4+2*n])]
	if len(fp) > 0 {
		s.Policy = unsafe.String(&fp[0], len(fp))
	}
	if rule := note[5+2*n+len(fp):]; len(rule) > 0 {
		s.Rule = unsafe.String(&rule[0], len(rule))
	}
	return true
}
