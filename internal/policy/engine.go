package policy

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// Sessions is the subscriber index at one moment: *sessionindex.Index,
// the snapshot of readmodel/sessions.
type Sessions interface {
	LookupIP(a netip.Addr) (sessionindex.Entry, bool)
	ByUsername(u string) []sessionindex.Entry
	ByDeviceID(d string) []sessionindex.Entry
}

// Settings is the settings read model at one moment: the snapshot of
// readmodel/settings.
type Settings interface {
	// Stack returns the documents that can apply to a subscriber of org
	// with attributes a; an org of "" gets the global layer alone.
	Stack(org string, a identity.Attributes) settings.Stack
}

// View is what one decision reads: the node's three read models and its
// RPZ zones, each taken once (an atomic load of its current snapshot) so
// that a decision never mixes two states of one model. Each member is an
// immutable snapshot: a change is published as a new value, which is what
// lets a caller remember a result for as long as the snapshot is the same
// (the resolver's per-socket policy memo). A nil member is
// absent: no sessions (every client gets the global layer), no settings
// (defaults), no feeds, no RPZ.
type View struct {
	Sessions   Sessions
	Settings   Settings
	Categories Categories
	RPZ        RPZ
}

// EngineConfig configures an Engine.
type EngineConfig struct {
	// View returns the current view; it is called once per decision.
	View func() View
	// CacheSize bounds the compiled policies kept (one per distinct set of
	// merged documents, Key); 0 means 65 536.
	CacheSize int
	// Options adjust every compilation.
	Options Options
	// Metrics counts the lookups of the policy cache; nil counts nothing.
	Metrics Metrics
}

// Metrics counts what only the engine sees: the lookups in its cache of
// compiled policies, where a miss merges and compiles a set of settings
// documents (many misses for a steady set of subscribers say the cache,
// CacheSize, is too small). Verdicts are not counted here: on the DNS
// path most answers come from the packet cache without a decision, so a
// count of answers by verdict and reason belongs where every answer
// passes. Implementations must be safe for concurrent use and should not
// allocate.
type Metrics interface {
	PolicyLookup(hit bool)
}

// nopMetrics counts nothing.
type nopMetrics struct{}

func (nopMetrics) PolicyLookup(bool) {}

// Engine is the decision (docs/policy.md) with its inputs resolved: a
// query's client (ip | username | deviceid) through the subscriber index to
// a session, the session's settings layers merged and compiled once per
// distinct set of documents (Key: shared by every session with the same
// layers), then DecideInto. The simulator calls Evaluate,
// which explains everything; the resolver calls PolicyFor once per query
// and DecideInto, which allocate nothing once the policy is cached. Both
// reach the same Policy for the same client, which is what makes "what the
// simulator says" be "what DNS does".
type Engine struct {
	view    func() View
	cache   *Cache
	opts    Options
	metrics Metrics
	// scratch holds *decideScratch for Evaluate.
	scratch sync.Pool
}

// decideScratch is the Decision and Input Evaluate hands DecideInto. Both
// reach an interface (the RPZ check), so the compiler moves whatever they
// point into to the heap: Evaluate's whole Result and Input, ≈ 0.6 KB per
// simulate, when DecideInto wrote into the Result. Pooled, they are
// reused, and the Result stays on the stack.
type decideScratch struct {
	d  Decision
	in Input
}

// NewEngine returns an engine reading cfg.View.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.View == nil {
		return nil, errorString("policy: EngineConfig.View is required")
	}
	if cfg.CacheSize < 0 {
		return nil, errorString("policy: EngineConfig.CacheSize must not be negative")
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopMetrics{}
	}
	return &Engine{view: cfg.View, cache: NewCache(cmp.Or(cfg.CacheSize, 1<<16)), opts: cfg.Options, metrics: cfg.Metrics}, nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// View returns the current view (one per decision).
func (e *Engine) View() View { return e.view() }

// Identified-by values of Subject.By, the simulate body's identity.by.
const (
	ByDeviceID = "deviceid"
	ByUsername = "username"
	ByIP       = "ip"
	ByNone     = "none"
)

// PolicyFor returns the compiled policy of the client at addr and its
// session (ok false: no session, the global policy). It is the resolver's
// per-query call: a lookup in the subscriber index and, once the policy of
// these documents is cached, no allocation.
func (e *Engine) PolicyFor(v *View, addr netip.Addr) (p *Policy, s sessionindex.Entry, ok bool) {
	if v.Sessions != nil {
		s, ok = v.Sessions.LookupIP(addr)
	}
	return e.PolicyOf(v, s, ok), s, ok
}

// KeyFor is the key the engine caches the policy of session s (of no
// session when !ok) under, in view v: the documents of its settings stack.
// Under one settings snapshot, sessions with equal keys have the same
// policy (a caller's own memo of policies can be keyed by it).
func (e *Engine) KeyFor(v *View, s sessionindex.Entry, ok bool) Key {
	st := sessionStack(v, s, ok)
	return stackKey(&st)
}

// sessionStack is the settings stack of session s (of no session when
// !ok).
func sessionStack(v *View, s sessionindex.Entry, ok bool) settings.Stack {
	if !ok {
		return stack(v, "", identity.Attributes{})
	}
	id := s.Identity() // its organisation read once
	return stack(v, id.Org, id.Attributes)
}

// stackKey is the cache key of a stack: its documents.
func stackKey(st *settings.Stack) Key {
	var buf [settings.MaxLayers]settings.Layer // stays on the stack: only KeyOf reads it
	return KeyOf(st.AppendLayers(buf[:0], 0, false))
}

// PolicyOf returns the policy of session s (of no session when !ok), as
// PolicyFor does for a session the caller has looked up already: compiled
// once per distinct set of documents (KeyFor).
func (e *Engine) PolicyOf(v *View, s sessionindex.Entry, ok bool) *Policy {
	st := sessionStack(v, s, ok)
	k := stackKey(&st)
	p, hit := e.cache.Get(&k)
	e.metrics.PolicyLookup(hit)
	if hit {
		return p
	}
	// Compact: the policy stays cached, and an Origin map would be most of
	// what it costs each GC cycle to mark (Effective.OriginOf reads it).
	p = CompileWith(settings.MergeCompact(st.AppendLayers(nil, 0, false)...), e.opts)
	e.cache.Put(&k, p)
	return p
}

// stack is the settings documents that can apply to a subscriber of org
// with attributes a; none without a settings read model.
func stack(v *View, org string, a identity.Attributes) settings.Stack {
	if v.Settings == nil {
		return settings.Stack{}
	}
	return v.Settings.Stack(org, a)
}

// LayerRequest names the simulator's request settings as a layer.
const LayerRequest = "request"

// Query is one question to Evaluate: the query and who asks it.
type Query struct {
	Input
	// IP, Username and DeviceID identify the client (any may be empty);
	// deviceid beats username beats ip: the most specific identity wins
	// (docs/policy.md, who asks). DeviceID is the prefix:value form
	// overrides carry.
	IP       netip.Addr
	Username string
	DeviceID string
	// Profile chooses the profile layer when HasProfile (simulate's
	// profile parameter).
	Profile    int
	HasProfile bool
	// Settings, when not nil, is applied as the most specific layer.
	Settings *settings.Document
}

// Subject is who a query was decided for.
type Subject struct {
	// By is how the session was found: ByDeviceID, ByUsername, ByIP or
	// ByNone (no identifier given, or none found: the global layer).
	By        string
	IP        netip.Addr
	Org       string
	SessionID string
	identity.Attributes
	// Profile is the profile layer chosen, when HasProfile.
	Profile    int
	HasProfile bool
	// Others are the ids of the other sessions the identifier matched
	// (a username or device id in several sessions), in (org, id) order.
	Others []string
}

// Result is an explained decision.
type Result struct {
	Decision
	Subject Subject
	// Layers are the names of the settings layers merged, least specific
	// first ("global", "org:acme", "username:alice", "request").
	Layers    []string
	Effective *settings.Effective
	// EDE is the Extended DNS Error code the resolver puts on the answer
	// (Decision.EDE), 0 when none.
	EDE uint16
	// Steps are the identity and settings steps that came before the
	// decision's trace, in the same shape.
	Steps []TraceEntry
}

// Trace steps of Evaluate beside the decision's.
const (
	StepIdentity Reason = "identity"
	StepSettings Reason = "settings"
)

// Evaluate resolves q's client, merges its settings and decides, with
// everything the simulator explains. It allocates; the DNS path uses
// PolicyFor and DecideInto. Without request settings or an explicit
// profile it decides with the very Policy the resolver uses for the same
// session.
func (e *Engine) Evaluate(q *Query) Result {
	v := e.view()
	var r Result
	s, found := e.resolve(&v, q, &r.Subject)
	r.Steps = make([]TraceEntry, 1, 2) // identity, settings: one allocation
	r.Steps[0] = TraceEntry{Step: StepIdentity, Result: describeSubject(&r.Subject)}

	var a identity.Attributes
	if found {
		a = s.Identity().Attributes
	}
	st := stack(&v, r.Subject.Org, a)
	r.Subject.Profile, r.Subject.HasProfile = st.Profile(q.Profile, q.HasProfile)
	layers := st.AppendLayers(make([]settings.Layer, 0, settings.MaxLayers+1), q.Profile, q.HasProfile)
	if q.Settings != nil {
		layers = append(layers, settings.Layer{Name: LayerRequest, Doc: q.Settings})
	}
	var p *Policy
	if q.Settings == nil && !q.HasProfile {
		p = e.PolicyOf(&v, s, found) // the resolver's policy, from the same cache
	} else {
		p = CompileWith(settings.Merge(layers...), e.opts)
	}
	r.Effective = p.Effective()
	r.Layers = make([]string, 0, len(layers))
	for _, l := range layers {
		r.Layers = append(r.Layers, l.Name)
	}
	r.Steps = append(r.Steps, TraceEntry{Step: StepSettings, Result: settingsStep(r.Layers, p.Fingerprint())})

	sc, _ := e.scratch.Get().(*decideScratch)
	if sc == nil {
		sc = new(decideScratch)
	}
	sc.in = q.Input
	sc.in.RPZ = v.RPZ
	sc.in.LookupAlways = true
	sc.d = Decision{Trace: make([]TraceEntry, 0, TraceCap)}
	DecideInto(&sc.d, &sc.in, p, v.Categories)
	r.Decision = sc.d
	*sc = decideScratch{} // keeps nothing of this decision alive
	e.scratch.Put(sc)
	r.EDE, _ = r.Decision.EDE(p)
	return r
}

// resolve finds the session of q's client: deviceid, then username, then
// ip; the first identifier that finds a session wins.
func (e *Engine) resolve(v *View, q *Query, sub *Subject) (sessionindex.Entry, bool) {
	sub.By, sub.IP = ByNone, q.IP
	if v.Sessions == nil {
		return sessionindex.Entry{}, false
	}
	pick := func(by string, es []sessionindex.Entry) (sessionindex.Entry, bool) {
		if len(es) == 0 {
			return sessionindex.Entry{}, false
		}
		slices.SortFunc(es, func(a, b sessionindex.Entry) int {
			return cmp.Or(strings.Compare(a.Org(), b.Org()), strings.Compare(a.ID(), b.ID()))
		})
		for _, o := range es[1:] {
			sub.Others = append(sub.Others, o.ID())
		}
		fill(sub, by, es[0])
		return es[0], true
	}
	if q.DeviceID != "" {
		if s, ok := pick(ByDeviceID, v.Sessions.ByDeviceID(q.DeviceID)); ok {
			return s, true
		}
	}
	if q.Username != "" {
		if s, ok := pick(ByUsername, v.Sessions.ByUsername(q.Username)); ok {
			return s, true
		}
	}
	if q.IP.IsValid() {
		if s, ok := v.Sessions.LookupIP(q.IP); ok {
			fill(sub, ByIP, s)
			return s, true
		}
	}
	return sessionindex.Entry{}, false
}

func fill(sub *Subject, by string, s sessionindex.Entry) {
	id := s.Identity()
	sub.By, sub.Org, sub.SessionID, sub.Attributes = by, id.Org, s.ID(), id.Attributes
}

func describeSubject(s *Subject) string {
	if s.By == ByNone {
		return "no session found: the global layer alone"
	}
	var b strings.Builder
	b.Grow(len("by : session  of org ") + len(s.By) + len(s.SessionID) + len(s.Org))
	for _, p := range [...]string{"by ", s.By, ": session ", s.SessionID, " of org ", s.Org} {
		b.WriteString(p)
	}
	if len(s.Others) > 0 {
		b.WriteString("; also matched " + strconv.Itoa(len(s.Others)) + " other session(s): " + strings.Join(s.Others, ", "))
	}
	return b.String()
}

// settingsStep is the settings step's result, "layers global < org:acme;
// fingerprint …", built in one allocation (it is made for every Evaluate).
func settingsStep(ls []string, fingerprint string) string {
	const none, sep, fp = "(none: defaults)", " < ", "; fingerprint "
	n := len("layers ") + len(fp) + len(fingerprint) + len(none)
	for _, l := range ls {
		n += len(l) + len(sep)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString("layers ")
	if len(ls) == 0 {
		b.WriteString(none)
	}
	for i, l := range ls {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(l)
	}
	b.WriteString(fp)
	b.WriteString(fingerprint)
	return b.String()
}
