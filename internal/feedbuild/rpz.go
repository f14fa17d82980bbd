package feedbuild

import (
	"errors"
	"fmt"
	"strings"
)

// Causes of the rpz importer.
const (
	CauseApex        Cause = "apex"          // the zone's own records (SOA, NS …)
	CauseNotPolicy   Cause = "not-policy"    // SOA, NS, DNAME or DNSSEC records below the apex: not a policy
	CauseRPZIP       Cause = "rpz-ip"        // response IP trigger
	CauseRPZNSIP     Cause = "rpz-nsip"      // name server IP trigger
	CauseRPZNSDName  Cause = "rpz-nsdname"   // name server name trigger
	CauseRPZClientIP Cause = "rpz-client-ip" // client IP trigger
	CausePassthru    Cause = "passthru"      // CNAME rpz-passthru. (or to itself): an allow rule, not a listing
	CauseOutOfZone   Cause = "out-of-zone"   // an absolute owner outside the zone (or before its origin is known)
)

// noteWildcardOnly counts "*.name" triggers whose zone has no trigger for
// name itself. RPZ's wildcard leaves name out; the feed's key for name
// covers it too (docs/feeds.md).
const noteWildcardOnly = "wildcard-without-apex"

// rpzImporter reads a zone file (RFC 1035 master file syntax) whose owner
// names are RPZ QNAME triggers relative to the zone's origin. It keeps the
// state a zone file carries from line to line: $ORIGIN, the last owner, and
// a record that parentheses continue over several lines.
type rpzImporter struct {
	zone      string // the apex, absolute, lower-case, no trailing dot ("" is the root)
	zoneKnown bool
	origin    string // the current $ORIGIN relative to the apex ("" is the apex)
	originOut bool   // the current $ORIGIN lies outside the zone

	seenRecord bool // a record came before: an $ORIGIN can no longer name the zone

	owner      string // the last owner, relative to the apex
	ownerCause Cause  // why the last owner is unusable, if it is
	haveOwner  bool

	pending      []string // tokens of a record continued by parentheses
	pendingBlank bool     // that record's first line began with white space
	depth        int      // open parentheses
	startLine    int
	lineNo       int

	wildcards map[string]bool
	names     map[string]bool
}

func (p *rpzImporter) line(s string, st *Stats, emit func(Entry)) error {
	p.lineNo++
	if p.depth == 0 && strings.HasPrefix(strings.TrimSpace(s), ";") {
		st.skip(CauseComment)
		return nil
	}
	tokens, depth, ok := tokenizeZoneLine(s, p.depth)
	if !ok {
		if p.depth > 0 {
			return fmt.Errorf("unbalanced quote or parenthesis in the record that starts at line %d", p.startLine)
		}
		st.skip(CauseMalformed)
		return nil
	}
	if p.depth == 0 {
		p.pending = p.pending[:0]
		p.pendingBlank = s != "" && (s[0] == ' ' || s[0] == '\t')
		p.startLine = p.lineNo
	}
	p.pending = append(p.pending, tokens...)
	p.depth = depth
	if depth > 0 || len(p.pending) == 0 {
		return nil
	}
	return p.record(p.pending, p.pendingBlank, st, emit)
}

func (p *rpzImporter) finish(st *Stats, _ func(Entry)) error {
	if p.depth > 0 {
		return fmt.Errorf("the record that starts at line %d never closes its parenthesis", p.startLine)
	}
	for w := range p.wildcards {
		if !p.names[w] {
			st.note(noteWildcardOnly)
		}
	}
	return nil
}

// record handles one logical record or directive.
func (p *rpzImporter) record(tokens []string, blankOwner bool, st *Stats, emit func(Entry)) error {
	if !blankOwner && strings.HasPrefix(tokens[0], "$") {
		return p.directive(tokens)
	}
	p.seenRecord = true
	i := 0
	var ownerTok string
	if !blankOwner {
		ownerTok, i = tokens[0], 1
	}
	// Up to a TTL and a class, in either order, then the type.
	for n := 0; n < 2 && i < len(tokens) && (isTTL(tokens[i]) || isClass(tokens[i])); n++ {
		i++
	}
	if i >= len(tokens) {
		st.skip(CauseMalformed)
		return nil
	}
	typ, rdata := strings.ToUpper(tokens[i]), tokens[i+1:]

	if blankOwner {
		if !p.haveOwner {
			st.skip(CauseMalformed) // no previous owner to repeat
			return nil
		}
	} else {
		p.owner, p.ownerCause = p.resolve(ownerTok, typ)
		p.haveOwner = true
	}
	rel := p.owner
	switch {
	case p.ownerCause != "":
		st.skip(p.ownerCause)
		return nil
	case rel == "":
		st.skip(CauseApex)
		return nil
	case isNonPolicyType(typ):
		st.skip(CauseNotPolicy)
		return nil
	}
	last := rel[strings.LastIndexByte(rel, '.')+1:]
	switch last {
	case "rpz-ip":
		st.skip(CauseRPZIP)
		return nil
	case "rpz-nsip":
		st.skip(CauseRPZNSIP)
		return nil
	case "rpz-nsdname":
		st.skip(CauseRPZNSDName)
		return nil
	case "rpz-client-ip":
		st.skip(CauseRPZClientIP)
		return nil
	}
	name, wildcard := rel, false
	if rest, ok := strings.CutPrefix(rel, "*."); ok {
		name, wildcard = rest, true
	}
	if typ == "CNAME" && len(rdata) == 1 {
		target := strings.ToLower(rdata[0])
		if target == "rpz-passthru." || target == name+"." {
			// The second is RPZ's older spelling of PASSTHRU: a CNAME to
			// the trigger's own name.
			st.skip(CausePassthru)
			return nil
		}
	}
	if name == "*" || strings.HasPrefix(name, "*") {
		st.skip(CauseWildcard) // "*" alone would be every name; "**.x" nothing valid
		return nil
	}
	norm, cause := normalizeName(name)
	if cause != "" {
		st.skip(cause)
		return nil
	}
	if wildcard {
		if p.wildcards == nil {
			p.wildcards = map[string]bool{}
		}
		p.wildcards[norm] = true
	} else {
		if p.names == nil {
			p.names = map[string]bool{}
		}
		p.names[norm] = true
	}
	emit(Entry{Name: norm})
	return nil
}

// resolve turns an owner token into a name relative to the apex, or the
// cause it cannot be used. The first SOA's absolute owner fixes the apex
// when no $ORIGIN did.
func (p *rpzImporter) resolve(tok, typ string) (string, Cause) {
	if strings.Contains(tok, `\`) {
		return "", CauseInvalidName // escaped bytes: never in a valid host name
	}
	tok = strings.ToLower(tok)
	switch {
	case tok == "@":
		if p.originOut {
			return "", CauseOutOfZone
		}
		return p.origin, ""
	case strings.HasSuffix(tok, "."):
		abs := strings.TrimSuffix(tok, ".")
		if !p.zoneKnown {
			if typ != "SOA" {
				return "", CauseOutOfZone
			}
			p.zone, p.zoneKnown = abs, true
			return "", ""
		}
		rel, ok := p.stripZone(abs)
		if !ok {
			return "", CauseOutOfZone
		}
		return rel, ""
	default:
		if p.originOut {
			return "", CauseOutOfZone
		}
		return joinName(tok, p.origin), ""
	}
}

// stripZone makes an absolute name relative to the apex.
func (p *rpzImporter) stripZone(abs string) (string, bool) {
	switch {
	case p.zone == "":
		return abs, true
	case abs == p.zone:
		return "", true
	case strings.HasSuffix(abs, "."+p.zone):
		return abs[:len(abs)-len(p.zone)-1], true
	}
	return "", false
}

func (p *rpzImporter) directive(tokens []string) error {
	switch strings.ToUpper(tokens[0]) {
	case "$TTL":
		return nil
	case "$ORIGIN":
		if len(tokens) != 2 || strings.Contains(tokens[1], `\`) {
			return errors.New("$ORIGIN takes one name without escapes")
		}
		o := strings.ToLower(tokens[1])
		if !strings.HasSuffix(o, ".") {
			// Relative to the current origin.
			if !p.originOut {
				p.origin = joinName(o, p.origin)
			}
			return nil
		}
		abs := strings.TrimSuffix(o, ".")
		if !p.zoneKnown {
			if p.seenRecord {
				// Records came relative to an apex this file never named:
				// names under this origin cannot be related to it.
				p.originOut = true
				return nil
			}
			// An absolute $ORIGIN before any record names the zone, as
			// the zone statement of named.conf would.
			p.zone, p.zoneKnown, p.origin, p.originOut = abs, true, "", false
			return nil
		}
		p.origin, p.originOut = "", false
		if rel, ok := p.stripZone(abs); ok {
			p.origin = rel
		} else {
			p.originOut = true
		}
		return nil
	default:
		// $INCLUDE and $GENERATE would bring records this file does not
		// hold; importing the rest would be a partial zone.
		return fmt.Errorf("directive %s is not supported: flatten the zone first (e.g. named-compilezone -D -o - ZONE FILE)", tokens[0])
	}
}

func joinName(rel, origin string) string {
	if origin == "" {
		return rel
	}
	return rel + "." + origin
}

func isTTL(tok string) bool {
	if tok == "" || tok[0] < '0' || tok[0] > '9' {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i] | 0x20; (tok[i] < '0' || tok[i] > '9') && !strings.ContainsRune("smhdw", rune(c)) {
			return false
		}
	}
	return true
}

func isClass(tok string) bool {
	switch strings.ToUpper(tok) {
	case "IN", "CH", "CS", "HS":
		return true
	}
	return false
}

// isNonPolicyType reports record types that carry no policy: zone
// structure and DNSSEC (a signed RPZ zone has them beside the policies).
func isNonPolicyType(t string) bool {
	switch t {
	case "SOA", "NS", "DS", "DNAME", "RRSIG", "NSEC", "NSEC3", "NSEC3PARAM", "DNSKEY", "CDS", "CDNSKEY", "ZONEMD":
		return true
	}
	return false
}

// tokenizeZoneLine splits one line of a zone file into tokens: white space
// separates, ';' starts a comment, "…" is one token (its quotes dropped),
// '(' and ')' continue a record over lines (depth counts them). ok is false
// for an unterminated quote or a ')' without '('.
func tokenizeZoneLine(s string, depth int) (tokens []string, newDepth int, ok bool) {
	var tok strings.Builder
	inTok := false
	flush := func() {
		if inTok {
			tokens = append(tokens, tok.String())
			tok.Reset()
			inTok = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ';':
			flush()
			return tokens, depth, true
		case c == ' ' || c == '\t' || c == '\r':
			flush()
		case c == '(':
			flush()
			depth++
		case c == ')':
			flush()
			if depth--; depth < 0 {
				return nil, 0, false
			}
		case c == '"':
			flush()
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					j++
				}
			}
			if j >= len(s) {
				return nil, depth, false
			}
			tokens = append(tokens, s[i+1:j])
			i = j
		case c == '\\' && i+1 < len(s):
			tok.WriteByte(c)
			tok.WriteByte(s[i+1])
			inTok = true
			i++
		default:
			tok.WriteByte(c)
			inTok = true
		}
	}
	flush()
	return tokens, depth, true
}
