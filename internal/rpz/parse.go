package rpz

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/policy"
)

// ParseOptions name a zone and say how to read it.
type ParseOptions struct {
	// Name is the zone's name in rules ("rpz:<Name> …").
	Name string
	// File names the source in errors.
	File string
	// Origin is the origin of relative names before the first $ORIGIN
	// (ZoneConfig.Origin); "" is the root.
	Origin string
	// MaxRecords caps the records read; 0 means DefaultMaxRecords.
	MaxRecords int
}

// DefaultMaxRecords is the default cap on one zone's records: far above
// any operator zone (the largest public RPZ feeds hold a few million
// triggers), far below what would exhaust a node.
const DefaultMaxRecords = 20_000_000

// defaultTTL lets records without a TTL parse when the file has no $TTL.
// TTLs do not reach the Decision (the resolver picks the TTL of what it
// synthesises), so the value does not matter.
const defaultTTL = 3600

// Action names in rule texts: policy's action names, and "passthru".
const (
	actionNXDomain = "nxdomain"
	actionNoData   = "nodata"
	actionDrop     = "drop"
	actionTruncate = "truncate"
	actionPassthru = "passthru"
	actionRedirect = "redirect"
	actionCNAME    = "cname"
)

// Parse reads one RPZ zone file. The file must begin with its SOA record:
// its owner is the apex, and every trigger is an owner name relative to
// it. $ORIGIN and $TTL are honoured, $GENERATE is expanded (at most 65,535
// records each), $INCLUDE is refused: it would read a file the config does
// not name and the poller does not watch.
//
// Syntax errors come back with the file and line (miekg/dns's
// *dns.ParseError); semantic errors (no SOA, a record before it, a
// trigger given two actions) name the record and its line. Records that make no
// trigger are counted by reason in Stats, and the rest of the zone loads.
func Parse(r io.Reader, o ParseOptions) (*Zone, error) {
	if o.MaxRecords <= 0 {
		o.MaxRecords = DefaultMaxRecords
	}
	if o.Origin == "" {
		o.Origin = "."
	}
	b := &builder{opts: o, triggers: map[string]*trigger{}, stats: Stats{Skipped: map[SkipReason]int{}}}
	br := bufio.NewReaderSize(r, 64<<10)
	// A byte order mark (an editor's) would be read as part of the first
	// owner name.
	if bom, _ := br.Peek(3); string(bom) == "\ufeff" {
		_, _ = br.Discard(3)
	}
	lr := &lineReader{br: br}
	zp := dns.NewZoneParser(lr, o.Origin, o.File)
	zp.SetDefaultTTL(defaultTTL)
	// $INCLUDE stays disallowed: ZoneParser's default.
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		b.line = lr.line()
		if err := b.add(rr); err != nil {
			return nil, fmt.Errorf("rpz zone %q: %s line %d: %w", o.Name, b.where(), b.line, err)
		}
	}
	if err := zp.Err(); err != nil {
		return nil, fmt.Errorf("rpz zone %q: %w", o.Name, err)
	}
	if !b.haveSOA {
		return nil, fmt.Errorf("rpz zone %q: %s: no SOA record: an RPZ zone file begins with its SOA, whose owner is the apex the triggers are relative to", o.Name, b.where())
	}
	return b.zone(), nil
}

// lineReader counts the lines ZoneParser has read, so that an error about
// a record it returned can name the record's line: ZoneParser reads
// through io.ByteReader when the reader has it, and returns a record as
// soon as it has read the newline that ends it. (A record from $GENERATE
// gets the directive's line.)
type lineReader struct {
	br       *bufio.Reader
	newlines int
	last     byte
}

func (l *lineReader) ReadByte() (byte, error) {
	c, err := l.br.ReadByte()
	if err == nil {
		if c == '\n' {
			l.newlines++
		}
		l.last = c
	}
	return c, err
}

func (l *lineReader) Read(p []byte) (int, error) {
	n, err := l.br.Read(p)
	if n > 0 {
		l.newlines += bytes.Count(p[:n], []byte{'\n'})
		l.last = p[n-1]
	}
	return n, err
}

// line is the line of the record just returned: the last line read (for
// a record continued over lines in parentheses, its last). The file's
// last record may lack its newline.
func (l *lineReader) line() int {
	if l.last == '\n' {
		return l.newlines
	}
	return l.newlines + 1
}

// trigger gathers the records of one owner name while a file is read.
type trigger struct {
	name string // lower-case A-label; under a wildcard its base ("" for "*")
	wild bool
	kind kind
	// target is a local CNAME's target (for expand, the part after "*").
	target string
	expand bool
	a      []netip.Addr
	aaaa   []netip.Addr
	txt    []string
	// first is the trigger's first record and firstLine its line, for a
	// conflict's message (formatted only then: most zones have none).
	first     dns.RR
	firstLine int
}

// kind is what a trigger does.
type kind uint8

const (
	kindNXDomain kind = iota + 1
	kindNoData
	kindDrop
	kindTruncate
	kindPassthru
	kindLocal // A, AAAA and TXT local data, together
	kindCNAME // a local CNAME
)

// builder turns a ZoneParser's records into a Zone.
type builder struct {
	opts     ParseOptions
	line     int // of the record being added
	haveSOA  bool
	apex     string
	serial   uint32
	triggers map[string]*trigger // by trigger text ("*.example.com")
	order    []*trigger          // as first read, so rules are built in file order
	stats    Stats
}

func (b *builder) where() string {
	if b.opts.File != "" {
		return b.opts.File
	}
	return "zone"
}

func (b *builder) skip(r SkipReason) { b.stats.Skipped[r]++ }

// add takes one record.
func (b *builder) add(rr dns.RR) error {
	b.stats.Records++
	if b.stats.Records > b.opts.MaxRecords {
		return fmt.Errorf("more than %d records: the zone is refused whole (raise MaxRecords if it is genuine)", b.opts.MaxRecords)
	}
	h := rr.Header()
	owner := strings.ToLower(h.Name)
	if !b.haveSOA {
		soa, ok := rr.(*dns.SOA)
		if !ok {
			return fmt.Errorf("the first record is %q, not the zone's SOA: an RPZ zone file begins with its SOA, whose owner is the apex the triggers are relative to", recordText(rr))
		}
		if h.Class != dns.ClassINET {
			return fmt.Errorf("the SOA %q is not of class IN", recordText(rr))
		}
		if strings.Contains(owner, `\`) {
			return fmt.Errorf("the SOA's owner %q has escapes: not a usable apex", h.Name)
		}
		b.haveSOA, b.apex, b.serial = true, strings.TrimSuffix(owner, "."), soa.Serial
		return nil
	}
	if h.Class != dns.ClassINET {
		b.skip(SkipClass)
		return nil
	}
	rel, ok := b.relative(owner)
	switch {
	case !ok:
		b.skip(SkipOutOfZone)
		return nil
	case rel == "" && isZoneData(h.Rrtype):
		b.skip(SkipZoneData)
		return nil
	case rel == "":
		b.skip(SkipApex)
		return nil
	case h.Rrtype == dns.TypeSOA:
		return fmt.Errorf("a second SOA %q below the apex %q: a zone file holds one zone", recordText(rr), b.apex+".")
	}
	// Triggers other than QNAME end with their label (draft-vixie-dnsop-
	// dns-rpz §4): 32.1.0.0.10.rpz-client-ip, ns1.example.rpz-nsdname.
	switch rel[strings.LastIndexByte(rel, '.')+1:] {
	case "rpz-client-ip":
		b.skip(SkipClientIP)
		return nil
	case "rpz-ip":
		b.skip(SkipIP)
		return nil
	case "rpz-nsdname":
		b.skip(SkipNSDName)
		return nil
	case "rpz-nsip":
		b.skip(SkipNSIP)
		return nil
	}
	if isZoneData(h.Rrtype) {
		b.skip(SkipZoneData)
		return nil
	}
	switch h.Rrtype {
	case dns.TypeCNAME, dns.TypeA, dns.TypeAAAA, dns.TypeTXT:
	default:
		b.skip(SkipType)
		return nil
	}
	name, wild, ok := parseTrigger(rel)
	if !ok {
		b.skip(SkipName)
		return nil
	}
	c := trigger{name: name, wild: wild}
	switch rr := rr.(type) {
	case *dns.CNAME:
		reason := cnameAction(&c, rr.Target)
		if reason != "" {
			b.skip(reason)
			return nil
		}
	case *dns.A:
		a, ok := netip.AddrFromSlice(rr.A.To4())
		if !ok {
			b.skip(SkipType) // the parser gives a 4-byte address; defensive
			return nil
		}
		c.kind, c.a = kindLocal, []netip.Addr{a}
	case *dns.AAAA:
		a, ok := netip.AddrFromSlice(rr.AAAA.To16())
		if !ok {
			b.skip(SkipType)
			return nil
		}
		c.kind, c.aaaa = kindLocal, []netip.Addr{a}
	case *dns.TXT:
		s, err := txtData(rr)
		if err != nil {
			return fmt.Errorf("TXT %q: %v", recordText(rr), err)
		}
		c.kind, c.txt = kindLocal, []string{s}
	}
	return b.merge(&c, rr)
}

// relative makes an absolute owner (lower case, with the trailing dot)
// relative to the apex: "" for the apex itself, ok false outside the zone.
func (b *builder) relative(owner string) (rel string, ok bool) {
	o := strings.TrimSuffix(owner, ".")
	switch {
	case b.apex == "":
		return o, true
	case o == b.apex:
		return "", true
	case strings.HasSuffix(o, b.apex) && len(o) > len(b.apex) && o[len(o)-len(b.apex)-1] == '.':
		return o[:len(o)-len(b.apex)-1], true
	}
	return "", false
}

// parseTrigger splits a relative owner into its name and whether it is a
// wildcard ("*.example.com" → "example.com"; "*" → ""). The name is
// normalised as policy compares names: lower-case A-labels.
func parseTrigger(rel string) (name string, wild, ok bool) {
	if strings.Contains(rel, `\`) {
		return "", false, false // an escaped byte: no host name a query can carry
	}
	if rel == "*" {
		return "", true, true
	}
	if rest, cut := strings.CutPrefix(rel, "*."); cut {
		rel, wild = rest, true
	}
	if strings.Contains(rel, "*") {
		return "", false, false // only a whole leading label is a wildcard
	}
	n, err := normalize(rel)
	if err != nil {
		return "", false, false
	}
	return n, wild, true
}

// normalize is feed.NormalizeName without its refusal of IP addresses:
// "10.0.0.1" is a name a query can ask for and a QNAME trigger may list.
func normalize(s string) (string, error) {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return feed.NormalizeName(s) // Unicode: UTS #46 to A-labels
		}
	}
	s = strings.ToLower(s)
	return s, feed.CheckName(s)
}

// cnameAction sets c from a CNAME's target as PowerDNS's RPZ loader
// reads it, or returns why the record is skipped.
func cnameAction(c *trigger, target string) SkipReason {
	t := strings.ToLower(strings.TrimSuffix(target, "."))
	switch t {
	case "":
		c.kind = kindNXDomain
		return ""
	case "*":
		c.kind = kindNoData
		return ""
	case "rpz-drop":
		c.kind = kindDrop
		return ""
	case "rpz-tcp-only":
		c.kind = kindTruncate
		return ""
	case "rpz-passthru":
		c.kind = kindPassthru
		return ""
	}
	// The RPZ draft reserves every name under a top-level label starting
	// with "rpz-" for actions; one not known here is a later format or a
	// typo, and PowerDNS discards it rather than answering a CNAME to it.
	if strings.HasPrefix(t[strings.LastIndexByte(t, '.')+1:], "rpz-") {
		return SkipAction
	}
	// The draft's older spelling of PASSTHRU: a CNAME to the trigger's own
	// name. PowerDNS would answer that CNAME, a loop for the client; BIND
	// and the draft read it as PASSTHRU, and so do we.
	if !c.wild && t == c.name {
		c.kind = kindPassthru
		return ""
	}
	if strings.Contains(t, `\`) {
		return SkipTarget
	}
	c.kind = kindCNAME
	if rest, ok := strings.CutPrefix(t, "*."); ok {
		// "*.garden.example.": the query name replaces the "*", as
		// PowerDNS does, so that the walled garden's logs show the name.
		n, err := normalize(rest)
		if err != nil || strings.Contains(rest, "*") {
			return SkipTarget
		}
		c.target, c.expand = "."+n, true
		return ""
	}
	n, err := normalize(t)
	if err != nil || strings.Contains(t, "*") {
		return SkipTarget
	}
	c.target = n
	return ""
}

// merge adds one record's contribution c to its trigger. A trigger takes
// one action, or local data: A, AAAA and TXT records together, or one
// CNAME. PowerDNS refuses a zone that gives a trigger a second action; we
// refuse it too, rather than pick one, and skip exact duplicates.
func (b *builder) merge(c *trigger, rr dns.RR) error {
	key := triggerText(c.name, c.wild)
	t := b.triggers[key]
	if t == nil {
		c.first, c.firstLine = rr, b.line
		b.triggers[key] = c
		b.order = append(b.order, c)
		return nil
	}
	conflict := func() error {
		return fmt.Errorf("trigger %s: %q conflicts with %q (line %d): a trigger takes one action, or local data (A, AAAA and TXT together, or one CNAME)", key, recordText(rr), recordText(t.first), t.firstLine)
	}
	switch {
	case t.kind != c.kind:
		return conflict()
	case t.kind == kindCNAME:
		if t.target != c.target || t.expand != c.expand {
			return conflict()
		}
		b.skip(SkipDuplicate)
	case t.kind == kindLocal:
		switch {
		case len(c.a) == 1 && !slices.Contains(t.a, c.a[0]):
			t.a = append(t.a, c.a[0])
		case len(c.aaaa) == 1 && !slices.Contains(t.aaaa, c.aaaa[0]):
			t.aaaa = append(t.aaaa, c.aaaa[0])
		case len(c.txt) == 1 && !slices.Contains(t.txt, c.txt[0]):
			t.txt = append(t.txt, c.txt[0])
		default:
			b.skip(SkipDuplicate)
		}
	default: // the same action twice
		b.skip(SkipDuplicate)
	}
	return nil
}

// zone builds the lookup maps and the rules' texts.
func (b *builder) zone() *Zone {
	nWild := 0
	for _, t := range b.order {
		if t.wild {
			nWild++
		}
	}
	z := &Zone{
		name:   b.opts.Name,
		file:   b.opts.File,
		apex:   b.apex,
		serial: b.serial,
		exact:  make(map[string]uint32, len(b.order)-nWild),
		wild:   make(map[string]uint32, nWild),
		rules:  make([]rule, len(b.order)),
		stats:  b.stats,
	}
	z.stats.Triggers, z.stats.Wildcards = len(b.order), nWild
	prefix := "rpz:" + b.opts.Name + " trigger="
	for i, t := range b.order {
		r := &z.rules[i]
		var action string
		switch t.kind {
		case kindNXDomain:
			r.verdict, r.action, action = policy.VerdictBlock, policy.ActionNXDomain, actionNXDomain
		case kindNoData:
			r.verdict, r.action, action = policy.VerdictBlock, policy.ActionNoData, actionNoData
		case kindDrop:
			r.verdict, r.action, action = policy.VerdictBlock, policy.ActionDrop, actionDrop
		case kindTruncate:
			r.verdict, r.action, action = policy.VerdictBlock, policy.ActionTruncate, actionTruncate
		case kindPassthru:
			r.verdict, r.action, action = policy.VerdictAllow, policy.ActionAllow, actionPassthru
		case kindLocal:
			r.verdict, r.action, action = policy.VerdictRedirect, policy.ActionRedirect, actionRedirect
			r.a, r.aaaa, r.txt = slices.Clip(t.a), slices.Clip(t.aaaa), slices.Clip(t.txt)
		case kindCNAME:
			r.verdict, r.action, action = policy.VerdictRedirect, policy.ActionCNAME, actionCNAME
			r.target, r.expand = t.target, t.expand
		}
		r.text = prefix + triggerText(t.name, t.wild) + " action=" + action
		if t.wild {
			z.wild[t.name] = uint32(i)
		} else {
			z.exact[t.name] = uint32(i)
		}
	}
	return z
}

// triggerText is a trigger as written relative to the apex.
func triggerText(name string, wild bool) string {
	switch {
	case !wild:
		return name
	case name == "":
		return "*"
	}
	return "*." + name
}

// isZoneData reports record types that carry no policy: zone structure
// and DNSSEC (a signed RPZ zone has them beside the policies).
func isZoneData(t uint16) bool {
	switch t {
	case dns.TypeSOA, dns.TypeNS, dns.TypeDS, dns.TypeDNAME, dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3,
		dns.TypeNSEC3PARAM, dns.TypeDNSKEY, dns.TypeCDS, dns.TypeCDNSKEY, dns.TypeZONEMD:
		return true
	}
	return false
}

// txtData returns a TXT record's character-strings, unescaped and joined:
// one string per record. miekg/dns keeps them in presentation form
// (\" and \DDD escapes); packing the record is its own unescaping.
func txtData(rr *dns.TXT) (string, error) {
	// Packed under the root name, the header is 11 bytes: the name's one
	// byte, type, class, TTL, then RDLENGTH at 9–10.
	cp := *rr
	cp.Hdr.Name = "."
	buf := make([]byte, dns.Len(&cp)+1)
	end, err := dns.PackRR(&cp, buf, 0, nil, false)
	if err != nil {
		return "", err
	}
	const hdr = 11
	if end < hdr || int(binary.BigEndian.Uint16(buf[hdr-2:hdr])) != end-hdr {
		return "", errors.New("cannot read the packed record back")
	}
	data := buf[hdr:end]
	var sb strings.Builder
	for len(data) > 0 {
		n := int(data[0])
		if 1+n > len(data) {
			return "", errors.New("cannot read the packed record back")
		}
		sb.Write(data[1 : 1+n])
		data = data[1+n:]
	}
	return sb.String(), nil
}

// recordText is a record in one line for messages.
func recordText(rr dns.RR) string {
	return strings.Join(strings.Fields(rr.String()), " ")
}
