package resolver

import (
	"cmp"
	"strings"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// Client ids name the device an encrypted query comes from when its
// source address cannot: many devices behind one NAT, or a phone on
// another network. A DoH client puts it in the path (/dns-query/{id}), a
// DoT or DoH client in the TLS server name (SNI), as the first label below
// dns.tls.client_id_suffix (kid1.dns.example.net → kid1). The adapters
// read and check it; the request carries it to the entry and the observer.

// maxClientID is the longest client id: one DNS label, so that every id a
// path can carry can also be put in a server name.
const maxClientID = 63

// validClientID lower-cases id and checks it: 1–63 characters of
// [a-z0-9-] (upper case accepted and folded). ok false: not a client id.
func validClientID(id string) (string, bool) {
	if len(id) == 0 || len(id) > maxClientID {
		return "", false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		case c >= 'A' && c <= 'Z':
		default:
			return "", false
		}
	}
	return strings.ToLower(id), true
}

// clientIDFromSNI is the client id a TLS server name carries below
// suffix: its first label, when the rest is suffix exactly (one label
// only: a.b.suffix is none). "" when suffix is "" (no client ids from the
// server name), the name is not below it, or the label is not a valid id:
// the connection is then served as one without a client id.
func clientIDFromSNI(serverName, suffix string) string {
	if suffix == "" || serverName == "" {
		return ""
	}
	name := strings.ToLower(strings.TrimSuffix(serverName, "."))
	label, rest, ok := strings.Cut(name, ".")
	if !ok || rest != suffix {
		return ""
	}
	id, ok := validClientID(label)
	if !ok {
		return ""
	}
	return id
}

// ClientIDDevicePrefix is the device id prefix a client id is looked up
// under: client id kid1 identifies the session whose deviceid is
// clientid:kid1 (set by whoever creates the session: a RADIUS attribute,
// the API).
const ClientIDDevicePrefix = "clientid:"

// How a query's subscriber was found, for the trace and the EDE text.
const (
	idBySource   = iota // the source address (no client id)
	idByClientID        // the client id's session
	idUnknownID         // a client id no session has: the source address instead
)

// identify finds the policy of q's client: by its client id first, when
// it has one and a session has the device id clientid:<id> (of several,
// the first by organisation and session id, as the simulator picks), else
// by its source address, as for every transport. The session found is
// kept in q.sess.
func (r *Resolver) identify(v *policy.View, q *query) *policy.Policy {
	if q.clientID != "" {
		q.idBy = idUnknownID
		if v.Sessions != nil {
			if s, ok := firstSession(v.Sessions.ByDeviceID(ClientIDDevicePrefix + q.clientID)); ok {
				q.idBy, q.sess = idByClientID, found{s: s, ok: true, known: true}
				return r.engine.PolicyOf(v, s, true)
			}
		}
	}
	p, s, ok := r.engine.PolicyFor(v, q.client)
	q.sess = found{s: s, ok: ok, known: true}
	return p
}

// firstSession is the first of es by organisation, then session id.
func firstSession(es []sessionindex.Entry) (sessionindex.Entry, bool) {
	if len(es) == 0 {
		return sessionindex.Entry{}, false
	}
	best := es[0]
	for _, e := range es[1:] {
		if c := cmp.Or(strings.Compare(e.Org(), best.Org()), strings.Compare(e.ID(), best.ID())); c < 0 {
			best = e
		}
	}
	return best, true
}

// identityText says which identity decided q: for the debug trace and
// an encrypted reply's EDE text.
func (q *query) identityText() string {
	switch q.idBy {
	case idByClientID:
		return "client id " + q.clientID
	case idUnknownID:
		return "source address (client id " + q.clientID + " matches no session)"
	}
	return "source address"
}
