package policy

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Verdict is what the decision does with the query (docs/policy.md).
type Verdict string

// Verdicts.
const (
	VerdictAllow    Verdict = "allow"
	VerdictBlock    Verdict = "block"
	VerdictRedirect Verdict = "redirect"
)

// Action is how the answer is built (docs/policy.md).
type Action string

// Actions. ActionTruncate (TCP only) is RPZ's.
const (
	ActionAllow    Action = "allow"
	ActionNXDomain Action = "nxdomain"
	ActionNoData   Action = "nodata"
	ActionRefused  Action = "refused"
	ActionDrop     Action = "drop"
	ActionTruncate Action = "truncate"
	ActionRedirect Action = "redirect"
	ActionCNAME    Action = "cname"
)

// Reason names the step that decided; it is also the name of a trace step.
type Reason string

// Reasons, in the order of evaluation.
const (
	ReasonFilteringOff Reason = "filtering_off"
	ReasonAllowlist    Reason = "allowlist"
	ReasonRPZ          Reason = "rpz"
	ReasonBlocklist    Reason = "blocklist"
	ReasonPaused       Reason = "paused"
	ReasonSafeSearch   Reason = "safe_search"
	ReasonCategory     Reason = "category"
	ReasonNetwork      Reason = "network"
	ReasonDefault      Reason = "default"
)

// Trace results: what a step found. A step that decided says "match" or
// names what applied; the rule is Decision.Rule.
const (
	ResultNoMatch       = "no match"
	ResultMatch         = "match"
	ResultOn            = "filtering on"
	ResultOff           = "filtering off"
	ResultNotConfigured = "not configured"
	ResultNotPaused     = "not paused"
	ResultPausedSetting = "paused by settings"
	ResultPausedWindow  = "paused by an open schedule"
	ResultSafeSearchOff = "safe search off"
	ResultNotEngine     = "not a search engine name"
	ResultNoFeeds       = "no feeds"
	ResultNoCategory    = "no category"
	ResultNotBlocked    = "categories not blocked"
	ResultBlocked       = "category blocked"
	ResultNoAnswer      = "no answer address"
	ResultNoNetworks    = "no blocked networks"
	ResultAllow         = "allow"
	ResultTCPOnly       = "tcp-only rule, over TCP: go on"
)

// StepCNAME is the trace entry that starts the steps of a name of the
// answer's CNAME chain (Input.Chain); its result is the name.
const StepCNAME Reason = "cname"

// MaxChain bounds Input.Chain: the simulator refuses a longer cname
// parameter, and the resolver answers a longer chain (or a looping one)
// SERVFAIL, as PowerDNS does past 10 CNAMEs.
const MaxChain = 10

// TraceEntry is one evaluated step.
type TraceEntry struct {
	Step   Reason `json:"step"`
	Result string `json:"result"`
}

// Categories is the feeds' lookup: *feeds.Set. Lookup appends to dst the
// categories of name[/path].
type Categories interface {
	Lookup(name, path string, dst []feed.Category) []feed.Category
}

// RPZ is the operator's response-policy zones (node config rpz, step 3 of the
// evaluation order; internal/rpz). Check reports whether a trigger matches; when
// it does it sets d's Verdict, Action, Target, A, AAAA, TXT and its rule
// (Decision.SetRule). A nil RPZ is traced "not configured".
type RPZ interface {
	Check(in *Input, d *Decision) bool
}

// Transport is how a query reached the resolver. The zero value is UDP.
type Transport uint8

// Transports: each is an adapter of the resolver's one entry.
const (
	TransportUDP Transport = iota
	TransportTCP
	TransportDoT
	TransportDoH
	TransportDoQ
)

var transportNames = [...]string{"udp", "tcp", "dot", "doh", "doq"}

// String is the transport's lower-case name ("udp", "tcp", "dot", "doh",
// "doq").
func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return "transport(" + strconv.Itoa(int(t)) + ")"
}

// Datagram reports a transport whose replies are cut to the client's
// payload size and flagged TC when they do not fit (UDP): the only one a
// truncate answer means anything on. The others carry any reply whole.
func (t Transport) Datagram() bool { return t == TransportUDP }

// Input is one query.
type Input struct {
	// Domain is the query name: a lower-case A-label; a trailing dot is
	// ignored.
	Domain string
	// Path is "" or a path starting with '/' (the simulator's; feed path
	// entries match it).
	Path string
	// QType is the query type (informational: the decision does not depend
	// on it; the answer builder does).
	QType uint16
	// AnswerAddr is the answer address (the simulator's rules_ip, the
	// resolver's upstream A/AAAA); invalid when there is none.
	AnswerAddr netip.Addr
	// Chain is the answer's CNAME chain after Domain: the names its CNAME
	// (and DNAME) records lead to, in order, lower-case A-labels (the
	// simulator's cname parameter, the resolver's upstream answer). When
	// Domain's own steps 1–7 allow by default, each name is decided by
	// steps 1–7 in turn, before step 8 (DecideInto). At most MaxChain.
	Chain []string
	// Time is when the query is asked: schedules are judged at it. The zero
	// time opens no schedule.
	Time time.Time
	// RPZ is the node's RPZ zones; nil when none are configured.
	RPZ RPZ
	// Transport is how the query came: an RPZ tcp-only rule (truncate)
	// applies over UDP only; over any other transport evaluation goes on,
	// as PowerDNS resolves such a query normally over TCP. The simulator
	// leaves it zero: the UDP view.
	Transport Transport
	// LookupAlways looks the categories up even when a step before the
	// category step decides (the simulator reports them); the resolver
	// leaves it false and skips the lookup.
	LookupAlways bool
}

// Decision is the outcome of DecideInto.
type Decision struct {
	Verdict Verdict
	Action  Action
	Reason  Reason
	// Target is the CNAME target: the engine's safe name under safe search,
	// the action's target for a cname block.
	Target string
	// A and AAAA are the block page's addresses for a redirect block. They
	// are the policy's: read only.
	A, AAAA []netip.Addr
	// TXT is an RPZ rule's local TXT data (read only).
	TXT []string
	// Categories are the categories found for the domain, with their feeds
	// and the matching feed keys (empty when not looked up).
	Categories []feed.Category
	// Matched is the index in Categories of the blocked category that
	// decided, -1 when none did.
	Matched int
	// Trace is the evaluated steps in order; the last decided.
	Trace []TraceEntry
	// Fingerprint is the policy's fingerprint.
	Fingerprint string
	// Via is the name of Input.Chain that decided, "" when the query name
	// (or step 8, 9) did. Its categories follow the query name's in
	// Categories.
	Via string

	rule string // the rule, when not a category's
}

// Rule is the rule that fired: "blocklist:ads.example", "paused:settings",
// "category:3 feed=threats key=bad.example", "network:10.0.0.0/8",
// "safe_search:google", "filtering:false", "" for the default; a name of
// the answer's CNAME chain that decided is named after it ("category:3
// feed=threats key=7zip.es via CNAME download.7zip.es"). It allocates for
// a category rule and a chain's only (the DNS path need not call it).
func (d Decision) Rule() string {
	r := d.rule
	if d.Reason == ReasonCategory && d.Matched >= 0 && d.Matched < len(d.Categories) {
		c := d.Categories[d.Matched]
		r = "category:" + strconv.Itoa(int(c.Code)) + " feed=" + c.Feed + " key=" + c.Key()
	}
	if d.Via != "" {
		r += " via CNAME " + d.Via
	}
	return r
}

// SetRule sets the rule text (for RPZ).
func (d *Decision) SetRule(rule string) { d.rule = rule }

// Reset empties d for reuse, keeping its buffers.
func (d *Decision) Reset() {
	*d = Decision{Categories: d.Categories[:0], Trace: d.Trace[:0], Matched: -1}
}

func (d *Decision) trace(step Reason, result string) {
	d.Trace = append(d.Trace, TraceEntry{Step: step, Result: result})
}

// TraceCap is the capacity a reused Decision.Trace needs: one entry per step.
const TraceCap = 9

// DecideInto evaluates in against p into d, reusing d's Trace and
// Categories buffers: with room for TraceCap trace entries and the
// domain's categories it allocates nothing (a chain's steps need more
// room). The first step that applies ends the evaluation; each evaluated
// step is a trace entry.
//
// The answer's CNAME chain (in.Chain) is decided after the query name's
// steps 1–7 and before step 8, only when none of those steps applied:
// filtering off, an allowlisted query name (AdGuard Home's rule: the
// allowlisted name wins) or an RPZ passthru lets the whole answer through.
// Each chain name then goes through steps 1–7 as a query name would, the
// trace marking its start (StepCNAME); the first whose verdict is not an
// allow decides the query with its own action, reason and rule, and Via
// names it. An allow of a chain name (its allowlist entry, a passthru)
// covers that name only: the next is decided too.
func DecideInto(d *Decision, in *Input, p *Policy, cats Categories) {
	d.Reset()
	d.Fingerprint = p.fingerprint
	name := strings.TrimSuffix(in.Domain, ".")
	if !p.decide(d, in, name, cats) && in.LookupAlways && cats != nil {
		d.Categories = cats.Lookup(name, in.Path, d.Categories[:0])
	}
}

func (d *Decision) allow(r Reason, rule string) {
	d.Verdict, d.Action, d.Reason, d.rule = VerdictAllow, ActionAllow, r, rule
}

func (d *Decision) block(p *Policy, r Reason, rule string) {
	d.Verdict, d.Reason, d.rule = VerdictBlock, r, rule
	d.Action = p.action.action
	switch p.action.action {
	case ActionRedirect:
		d.A, d.AAAA = p.action.a, p.action.aaaa
	case ActionCNAME:
		d.Target = p.action.target
	}
}

// decide runs the steps; it reports whether the category step looked the
// categories up.
func (p *Policy) decide(d *Decision, in *Input, name string, cats Categories) (lookedUp bool) {
	// The open schedule windows, once for every name (steps 5 and 7).
	var open uint64
	if !in.Time.IsZero() {
		for i := range p.schedules {
			if p.schedules[i].s.Open(in.Time) {
				open |= 1 << i
			}
		}
	}
	decided, lookedUp := p.decideName(d, in, name, in.Path, cats, open)
	if decided || p.decideChain(d, in, cats, open) {
		return lookedUp
	}

	// 8. network
	switch {
	case p.networks.empty():
		d.trace(ReasonNetwork, ResultNoNetworks)
	case !in.AnswerAddr.IsValid():
		d.trace(ReasonNetwork, ResultNoAnswer)
	default:
		if r, ok := p.networks.lookup(in.AnswerAddr.Unmap()); ok {
			d.trace(ReasonNetwork, ResultMatch)
			d.block(p, ReasonNetwork, r)
			return lookedUp
		}
		d.trace(ReasonNetwork, ResultNoMatch)
	}

	// 9. default
	d.trace(ReasonDefault, ResultAllow)
	d.allow(ReasonDefault, "")
	return lookedUp
}

// decideChain decides each name of in.Chain by steps 1–7 (DecideInto says
// why); it reports whether one decided. A chain name's categories are
// looked up after the query name's, and dropped again when it allows.
// in.Domain and in.Path are the chain name's while it is decided (the RPZ
// check reads the name from the Input) and restored after: a copy of the
// Input handed to the RPZ interface would be an allocation per name.
func (p *Policy) decideChain(d *Decision, in *Input, cats Categories, open uint64) bool {
	domain, path := in.Domain, in.Path
	base := len(d.Categories)
	for _, c := range in.Chain {
		c = strings.TrimSuffix(c, ".")
		d.trace(StepCNAME, c)
		in.Domain, in.Path = c, ""
		if decided, _ := p.decideName(d, in, c, "", cats, open); decided && d.Verdict != VerdictAllow {
			d.Via = c
			break
		}
		d.Categories, d.Matched = d.Categories[:base], -1
	}
	in.Domain, in.Path = domain, path
	return d.Via != ""
}

// decideName runs steps 1–7 on name: decided says that one applied,
// lookedUp that the category step looked name's categories up (appended
// to d.Categories).
func (p *Policy) decideName(d *Decision, in *Input, name, path string, cats Categories, open uint64) (decided, lookedUp bool) {
	// 1. filtering off
	if !p.filtering {
		d.trace(ReasonFilteringOff, ResultOff)
		d.allow(ReasonFilteringOff, "filtering:false")
		return true, false
	}
	d.trace(ReasonFilteringOff, ResultOn)

	// 2. allowlist
	if r, ok := p.allow.match(name); ok {
		d.trace(ReasonAllowlist, ResultMatch)
		d.allow(ReasonAllowlist, r)
		return true, false
	}
	d.trace(ReasonAllowlist, ResultNoMatch)

	// 3. RPZ
	if in.RPZ == nil {
		d.trace(ReasonRPZ, ResultNotConfigured)
	} else if in.RPZ.Check(in, d) {
		if d.Action == ActionTruncate && !in.Transport.Datagram() {
			d.Verdict, d.Action, d.Target, d.A, d.AAAA, d.TXT, d.rule = "", "", "", nil, nil, nil, ""
			d.trace(ReasonRPZ, ResultTCPOnly)
		} else {
			d.trace(ReasonRPZ, ResultMatch)
			d.Reason = ReasonRPZ
			return true, false
		}
	} else {
		d.trace(ReasonRPZ, ResultNoMatch)
	}

	// 4. blocklist
	if r, ok := p.block.match(name); ok {
		d.trace(ReasonBlocklist, ResultMatch)
		d.block(p, ReasonBlocklist, r)
		return true, false
	}
	d.trace(ReasonBlocklist, ResultNoMatch)

	// 5. paused, by settings or an open schedule
	if p.paused {
		d.trace(ReasonPaused, ResultPausedSetting)
		d.block(p, ReasonPaused, "paused:settings")
		return true, false
	}
	for i := range p.schedules {
		if open&(1<<i) != 0 && p.schedules[i].paused {
			d.trace(ReasonPaused, ResultPausedWindow)
			d.block(p, ReasonPaused, p.schedules[i].pausedRule)
			return true, false
		}
	}
	d.trace(ReasonPaused, ResultNotPaused)

	// 6. safe search
	if !p.safeSearch {
		d.trace(ReasonSafeSearch, ResultSafeSearchOff)
	} else if e, ok := safeNames[name]; ok {
		d.trace(ReasonSafeSearch, ResultMatch)
		d.Verdict, d.Action, d.Reason, d.rule = VerdictRedirect, ActionCNAME, ReasonSafeSearch, e.rule
		d.Target = e.target
		if e.engine == EngineYouTube {
			d.Target = p.youtube
		}
		return true, false
	} else {
		d.trace(ReasonSafeSearch, ResultNotEngine)
	}

	// 7. category
	if cats == nil {
		d.trace(ReasonCategory, ResultNoFeeds)
		return false, false
	}
	base := len(d.Categories)
	d.Categories = cats.Lookup(name, path, d.Categories)
	if len(d.Categories) == base {
		d.trace(ReasonCategory, ResultNoCategory)
	} else if i := p.blockedCategory(d.Categories[base:], open); i >= 0 {
		d.trace(ReasonCategory, ResultBlocked)
		d.Matched = base + i
		d.block(p, ReasonCategory, "")
		return true, true
	} else {
		d.trace(ReasonCategory, ResultNotBlocked)
	}
	return false, true
}

// blockedCategory returns the index of the first category blocked by the
// settings or by an open schedule, -1 when none is.
func (p *Policy) blockedCategory(cs []feed.Category, open uint64) int {
	for i := range cs {
		code := cs[i].Code
		if p.categories.has(code) {
			return i
		}
		for j := range p.schedules {
			if open&(1<<j) != 0 && p.schedules[j].categories.has(code) {
				return i
			}
		}
	}
	return -1
}
