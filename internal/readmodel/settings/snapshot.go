package settingsmodel

import (
	"hash/maphash"
	"maps"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// shardCount is how many maps the organisations are spread over. A burst
// of changes copies the maps of the shards it touches, not the map of every
// organisation: with a million organisations holding documents, a shard is
// a map of about 4 000 pointers.
const shardCount = 256

// Snapshot is one immutable state of the model: the global document and,
// per organisation, an immutable record of its documents by scope. A burst
// of changes builds the next snapshot from the last one, copying only the
// records (and shards) of the organisations it touches; every other record
// is shared. Its methods never block; Version, Stack and AppendLayers do
// not allocate.
type Snapshot struct {
	seed   maphash.Seed
	global *settings.Document
	// base is every organisation's least version: the version of the last
	// load, change of the global document, or removal of an organisation's
	// last document.
	base   uint64
	shards [shardCount]map[string]*orgDocs
	docs   int // documents held, the global one included
	orgs   int // organisations with at least one document
}

// orgDocs is one organisation's documents. A Layer held here carries its
// name (settings.Scope.Layer), built once when the document arrives rather
// than on every query.
type orgDocs struct {
	id string
	// version is the model's version when the record was last changed.
	version  uint64
	org      settings.Layer // Doc nil: no org document
	profiles map[int]settings.Layer
	// attrs are the location, username and deviceid documents by value,
	// indexed by attrIndex.
	attrs [3]map[string]settings.Layer
	docs  int
}

func attrIndex(k settings.ScopeKind) int { return int(k - settings.ScopeLocation) }

var attrKinds = [3]settings.ScopeKind{settings.ScopeLocation, settings.ScopeUsername, settings.ScopeDeviceID}

func emptySnapshot(seed maphash.Seed) *Snapshot { return &Snapshot{seed: seed} }

func (s *Snapshot) shard(org string) int { return int(maphash.String(s.seed, org) % shardCount) }

func (s *Snapshot) org(org string) *orgDocs { return s.shards[s.shard(org)][org] }

// Len returns how many documents the snapshot holds, the global one
// included.
func (s *Snapshot) Len() int { return s.docs }

// Orgs returns how many organisations have at least one document.
func (s *Snapshot) Orgs() int { return s.orgs }

// Global returns the global document, nil when there is none.
func (s *Snapshot) Global() *settings.Document { return s.global }

// Document returns org's document for scope sc, nil when there is none.
func (s *Snapshot) Document(org string, sc settings.Scope) *settings.Document {
	o := s.org(org)
	if o == nil {
		return nil
	}
	switch sc.Kind {
	case settings.ScopeOrg:
		return o.org.Doc
	case settings.ScopeProfile:
		return o.profiles[sc.Profile].Doc
	case settings.ScopeLocation, settings.ScopeUsername, settings.ScopeDeviceID:
		return o.attrs[attrIndex(sc.Kind)][sc.Value].Doc
	}
	return nil
}

// Version returns the version of org's settings: a number that grows
// whenever a document of org or the global document changes, and never
// goes back, so a policy merged from this snapshot's layers for a
// subscriber of org stays right for as long as Version(org) answers the
// same. It also grows, for every organisation, when the bucket is loaded
// again and when some organisation loses its last document; a put of a
// document equal to the one held changes nothing. Versions are this
// Model's own: they mean nothing to another node or process. An
// organisation with no documents has one too (its subscribers still merge
// the global layer).
func (s *Snapshot) Version(org string) uint64 {
	if o := s.org(org); o != nil && o.version > s.base {
		return o.version
	}
	return s.base
}

// Stack returns the documents that can apply to a subscriber of org with
// attributes a (settings.Stack): the global document, and org's own,
// profile, location, username and deviceid documents. An empty attribute
// has no document; an org of "" (no session) gets the global layer alone.
func (s *Snapshot) Stack(org string, a identity.Attributes) settings.Stack {
	var st settings.Stack
	if s.global != nil {
		st.Global = settings.Layer{Name: settings.LayerGlobal, Doc: s.global}
	}
	o := s.org(org)
	if o == nil {
		return st
	}
	st.Org, st.Profiles = o.org, o.profiles
	st.Location = o.attrs[attrIndex(settings.ScopeLocation)][a.Location]
	st.Username = o.attrs[attrIndex(settings.ScopeUsername)][a.Username]
	st.DeviceID = o.attrs[attrIndex(settings.ScopeDeviceID)][a.DeviceID]
	return st
}

// AppendLayers appends to dst the layers of a subscriber of org with
// attributes a that have a document, least specific first: global < org <
// profile < location < username < deviceid, named as settings.Merge
// reports origins ("global", "org:acme", "profile:1", "location:hq",
// "username:alice", "deviceid:mac:0a1b"). The profile layer is profile
// when hasProfile, else the profile the most specific of the global, org,
// location, username and deviceid documents sets (settings.Stack.Profile:
// the rule of the orgmanager's /settings/effective). With room for
// settings.MaxLayers more in dst it does not allocate.
func (s *Snapshot) AppendLayers(dst []settings.Layer, org string, a identity.Attributes, profile int, hasProfile bool) []settings.Layer {
	return s.Stack(org, a).AppendLayers(dst, profile, hasProfile)
}

// Layers is AppendLayers into a new slice.
func (s *Snapshot) Layers(org string, a identity.Attributes, profile int, hasProfile bool) []settings.Layer {
	return s.AppendLayers(make([]settings.Layer, 0, settings.MaxLayers), org, a, profile, hasProfile)
}

// All yields every document with its KV key, the global one first, then
// the organisations' in no particular order.
func (s *Snapshot) All(yield func(key string, doc *settings.Document) bool) {
	if s.global != nil && !yield(settings.GlobalKey, s.global) {
		return
	}
	for _, shard := range s.shards {
		for _, o := range shard {
			if !o.all(yield) {
				return
			}
		}
	}
}

func (o *orgDocs) all(yield func(string, *settings.Document) bool) bool {
	if o.org.Doc != nil && !yield(settings.Key(o.id, settings.Scope{Kind: settings.ScopeOrg}), o.org.Doc) {
		return false
	}
	for n, l := range o.profiles {
		if !yield(settings.Key(o.id, settings.Scope{Kind: settings.ScopeProfile, Profile: n}), l.Doc) {
			return false
		}
	}
	for i, m := range o.attrs {
		for v, l := range m {
			if !yield(settings.Key(o.id, settings.Scope{Kind: attrKinds[i], Value: v}), l.Doc) {
				return false
			}
		}
	}
	return true
}

// builder makes the next snapshot from a burst of changes, copy-on-write:
// the first change of an organisation copies its record, the first change
// of one of its scope maps copies that map, and the shard holding the
// record is copied once when the burst is finished.
type builder struct {
	next        *Snapshot
	version     uint64 // the version of what this burst changes
	ownShard    [shardCount]bool
	edits       map[string]*orgEdit
	baseChanged bool
}

// orgEdit is an organisation's record being changed by one burst.
type orgEdit struct {
	o           *orgDocs // this burst's copy
	shard       int
	ownProfiles bool
	ownAttrs    [3]bool
	changed     bool
}

func newBuilder(from *Snapshot, version uint64) *builder {
	next := *from
	return &builder{next: &next, version: version, edits: map[string]*orgEdit{}}
}

func (b *builder) changed() bool {
	if b.baseChanged {
		return true
	}
	for _, e := range b.edits {
		if e.changed {
			return true
		}
	}
	return false
}

// edit returns org's record for this burst, copied on first use.
func (b *builder) edit(org string) *orgEdit {
	if e := b.edits[org]; e != nil {
		return e
	}
	i := b.next.shard(org)
	o := &orgDocs{id: org}
	if old := b.next.shards[i][org]; old != nil {
		*o = *old
	}
	e := &orgEdit{o: o, shard: i}
	b.edits[org] = e
	return e
}

func (b *builder) put(v entry) {
	if !v.global {
		b.edit(v.org).put(v.scope, v.doc)
		return
	}
	if sameDoc(b.next.global, v.doc) {
		return
	}
	if b.next.global == nil {
		b.next.docs++
	}
	b.next.global = v.doc
	b.baseChanged = true
}

// del removes the document of key. A key ParseKey refuses was never held:
// its delete is the follower's for a value that did not decode.
func (b *builder) del(key string) {
	org, sc, global, err := settings.ParseKey(key)
	switch {
	case err != nil:
	case global:
		if b.next.global != nil {
			b.next.global = nil
			b.next.docs--
			b.baseChanged = true
		}
	case b.edits[org] != nil || b.next.org(org) != nil:
		b.edit(org).del(sc)
	}
}

// finish publishes the edited records in their (copied) shards and returns
// the next snapshot.
func (b *builder) finish() *Snapshot {
	for id, e := range b.edits {
		if !e.changed {
			continue
		}
		old := b.next.shards[e.shard][id]
		if old == nil && e.o.docs == 0 {
			continue // added and removed within the burst
		}
		shard := b.shardForWrite(e.shard)
		if old != nil {
			b.next.docs -= old.docs
			b.next.orgs--
		}
		if e.o.docs == 0 {
			// The organisation is gone. Its version would fall back to base,
			// which its subscribers' cached policies may already carry:
			// moving base keeps every version growing.
			delete(shard, id)
			b.baseChanged = true
			continue
		}
		e.o.version = b.version
		shard[id] = e.o
		b.next.docs += e.o.docs
		b.next.orgs++
	}
	if b.baseChanged {
		b.next.base = b.version
	}
	return b.next
}

func (b *builder) shardForWrite(i int) map[string]*orgDocs {
	if !b.ownShard[i] {
		if b.next.shards[i] == nil {
			b.next.shards[i] = map[string]*orgDocs{}
		} else {
			b.next.shards[i] = maps.Clone(b.next.shards[i])
		}
		b.ownShard[i] = true
	}
	return b.next.shards[i]
}

func (e *orgEdit) profilesForWrite() map[int]settings.Layer {
	if !e.ownProfiles {
		e.o.profiles = cloneOrMake(e.o.profiles)
		e.ownProfiles = true
	}
	return e.o.profiles
}

func (e *orgEdit) attrsForWrite(i int) map[string]settings.Layer {
	if !e.ownAttrs[i] {
		e.o.attrs[i] = cloneOrMake(e.o.attrs[i])
		e.ownAttrs[i] = true
	}
	return e.o.attrs[i]
}

func cloneOrMake[K comparable](m map[K]settings.Layer) map[K]settings.Layer {
	if m == nil {
		return map[K]settings.Layer{}
	}
	return maps.Clone(m)
}

func (e *orgEdit) put(sc settings.Scope, doc *settings.Document) {
	o := e.o
	var old *settings.Document
	switch sc.Kind {
	case settings.ScopeOrg:
		old = o.org.Doc
	case settings.ScopeProfile:
		old = o.profiles[sc.Profile].Doc
	default:
		old = o.attrs[attrIndex(sc.Kind)][sc.Value].Doc
	}
	if sameDoc(old, doc) {
		return
	}
	l := settings.Layer{Name: sc.Layer(o.id), Doc: doc}
	switch sc.Kind {
	case settings.ScopeOrg:
		o.org = l
	case settings.ScopeProfile:
		e.profilesForWrite()[sc.Profile] = l
	default:
		// The key is the name's tail ("alice" of "username:alice"): one
		// string per document rather than two, for the GC to mark.
		e.attrsForWrite(attrIndex(sc.Kind))[l.Name[len(l.Name)-len(sc.Value):]] = l
	}
	if old == nil {
		o.docs++
	}
	e.changed = true
}

func (e *orgEdit) del(sc settings.Scope) {
	o := e.o
	switch sc.Kind {
	case settings.ScopeOrg:
		if o.org.Doc == nil {
			return
		}
		o.org = settings.Layer{}
	case settings.ScopeProfile:
		if _, ok := o.profiles[sc.Profile]; !ok {
			return
		}
		m := e.profilesForWrite()
		delete(m, sc.Profile)
		if len(m) == 0 {
			o.profiles, e.ownProfiles = nil, false
		}
	default:
		i := attrIndex(sc.Kind)
		if _, ok := o.attrs[i][sc.Value]; !ok {
			return
		}
		m := e.attrsForWrite(i)
		delete(m, sc.Value)
		if len(m) == 0 {
			o.attrs[i], e.ownAttrs[i] = nil, false
		}
	}
	o.docs--
	e.changed = true
}

// sameDoc reports whether a new document b is the one held, a: documents
// are equal when their canonical JSON is.
func sameDoc(a, b *settings.Document) bool {
	return a != nil && (a == b || a.String() == b.String())
}
