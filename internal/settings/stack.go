package settings

// MaxLayers is how many layers a Stack can hand to Merge: global, org,
// profile, location, username, deviceid. A caller that appends into a
// buffer of this capacity does not allocate.
const MaxLayers = 6

// Stack is the stored documents that can apply to one subscriber of an
// organisation, each as the Layer Merge reports it ("global", "org:acme",
// "location:hq", …); a Layer whose Doc is nil has no document. It is the one
// statement of the layer rule (docs/policy.md, the layers), shared by the
// orgmanager's GET /org/{org}/settings/effective and the node's read model
// (readmodel/settings), so that the simulator, the resolver and the REST
// answer merge the same layers. A subscriber with no organisation (no
// session) has a Stack of Global alone.
type Stack struct {
	Global Layer
	Org    Layer
	// Profiles are the organisation's profile documents by number: all of
	// them, or at least those Profile can choose. A nil map has none.
	Profiles map[int]Layer
	// Location, Username and DeviceID are the documents of the
	// subscriber's attributes.
	Location, Username, DeviceID Layer
}

// Profile returns the number of the profile layer: explicit when
// hasExplicit (simulate's profile parameter), else the profile set by the
// most specific of the global, org, location, username and deviceid
// documents (ProfileOf; a profile document's own profile field chooses
// nothing). It reports false when neither names a profile. The profile
// chosen need not have a document.
func (s Stack) Profile(explicit int, hasExplicit bool) (int, bool) {
	if hasExplicit {
		return explicit, true
	}
	return ProfileOf(s.Global.Doc, s.Org.Doc, s.Location.Doc, s.Username.Doc, s.DeviceID.Doc)
}

// AppendLayers appends to dst the layers that have a document, least
// specific first: global < org < profile < location < username < deviceid,
// the profile layer being the one Profile(explicit, hasExplicit) chooses.
// Merge of the result is the subscriber's effective policy; layers without
// a document are left out, which changes nothing in the merge. With room
// for MaxLayers more in dst it does not allocate.
func (s Stack) AppendLayers(dst []Layer, explicit int, hasExplicit bool) []Layer {
	add := func(l Layer) {
		if l.Doc != nil {
			dst = append(dst, l)
		}
	}
	add(s.Global)
	add(s.Org)
	if n, ok := s.Profile(explicit, hasExplicit); ok {
		add(s.Profiles[n])
	}
	add(s.Location)
	add(s.Username)
	add(s.DeviceID)
	return dst
}
