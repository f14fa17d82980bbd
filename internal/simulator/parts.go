package simulator

import (
	"net/netip"
	"strconv"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/policy"
)

// The nested parts of a simulate body (identity, categories, layers,
// answer, trace) are rendered as JSON straight into the response (the body
// object, body.go) rather than built as maps: the trace alone was a dozen
// two-key maps per answer, and with the others they were most of the
// allocations per request and a good part of the GC's work. A script that
// reads one gets it decoded (a script sees the same tables as before; a
// value it changes comes back as a map, and withNulls still restores the
// identity's nulls). The keys come in the documented order, the order the
// appender gives the maps (simulateOrder).

// appendTrace renders the trace: Evaluate's identity and settings steps,
// then the decision's.
func appendTrace(b []byte, res *policy.Result) []byte {
	b = append(b, '[')
	n := 0
	for _, list := range [2][]policy.TraceEntry{res.Steps, res.Trace} {
		for _, st := range list {
			if n > 0 {
				b = append(b, ',')
			}
			n++
			b = append(b, `{"step":`...)
			b = httpapi.AppendJSONString(b, string(st.Step))
			b = append(b, `,"result":`...)
			b = httpapi.AppendJSONString(b, st.Result)
			b = append(b, '}')
		}
	}
	return append(b, ']')
}

// appendIdentity renders the identity object: identityFields in order,
// null for an unknown ip and for no profile, other_sessions when any.
func appendIdentity(b []byte, s *policy.Subject) []byte {
	b = append(b, `{"by":`...)
	b = httpapi.AppendJSONString(b, s.By)
	b = append(b, `,"ip":`...)
	b = appendAddr(b, s.IP)
	b = append(b, `,"org":`...)
	b = httpapi.AppendJSONString(b, s.Org)
	b = append(b, `,"session_id":`...)
	b = httpapi.AppendJSONString(b, s.SessionID)
	b = append(b, `,"username":`...)
	b = httpapi.AppendJSONString(b, s.Username)
	b = append(b, `,"deviceid":`...)
	b = httpapi.AppendJSONString(b, s.DeviceID)
	b = append(b, `,"location":`...)
	b = httpapi.AppendJSONString(b, s.Location)
	b = append(b, `,"profile":`...)
	if s.HasProfile {
		b = strconv.AppendInt(b, int64(s.Profile), 10)
	} else {
		b = append(b, "null"...)
	}
	if len(s.Others) > 0 {
		b = append(b, `,"other_sessions":`...)
		b = appendStrings(b, s.Others)
	}
	return append(b, '}')
}

// appendCategories renders categories as the bodies carry them
// (categories() as JSON).
func appendCategories(b []byte, cs []feed.Category) []byte {
	b = append(b, '[')
	for i, c := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"code":`...)
		b = strconv.AppendInt(b, int64(c.Code), 10)
		b = append(b, `,"title":`...)
		b = httpapi.AppendJSONString(b, c.Title)
		b = append(b, `,"feed":`...)
		b = httpapi.AppendJSONString(b, c.Feed)
		b = append(b, `,"match":`...)
		b = httpapi.AppendJSONString(b, c.Key())
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendAnswer renders answer(res) in answerOrder.
func appendAnswer(b []byte, res *policy.Result) []byte {
	b = append(b, '{')
	n := 0
	key := func(k string) {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = httpapi.AppendJSONString(b, k)
		b = append(b, ':')
	}
	switch res.Action {
	case policy.ActionAllow:
		key("rcode")
		b = httpapi.AppendJSONString(b, "NOERROR")
		key("forwarded")
		b = append(b, "true"...) // the upstream's answer
	case policy.ActionNXDomain:
		key("rcode")
		b = httpapi.AppendJSONString(b, "NXDOMAIN")
	case policy.ActionNoData:
		key("rcode")
		b = httpapi.AppendJSONString(b, "NOERROR")
		key("records")
		b = append(b, "[]"...)
	case policy.ActionRefused:
		key("rcode")
		b = httpapi.AppendJSONString(b, "REFUSED")
	case policy.ActionDrop:
		key("dropped")
		b = append(b, "true"...)
	case policy.ActionTruncate:
		key("truncated")
		b = append(b, "true"...) // over UDP; TCP gets the upstream's answer
	case policy.ActionRedirect:
		key("rcode")
		b = httpapi.AppendJSONString(b, "NOERROR")
		key("a")
		b = appendAddrs(b, res.A)
		key("aaaa")
		b = appendAddrs(b, res.AAAA)
		if len(res.TXT) > 0 {
			key("txt")
			b = appendStrings(b, res.TXT)
		}
	case policy.ActionCNAME:
		key("rcode")
		b = httpapi.AppendJSONString(b, "NOERROR")
		key("cname")
		b = httpapi.AppendJSONString(b, res.Target)
	}
	if res.EDE != 0 {
		key("ede")
		b = append(b, `{"code":`...)
		b = strconv.AppendInt(b, int64(res.EDE), 10)
		b = append(b, `,"text":`...)
		b = httpapi.AppendJSONString(b, string(res.Reason)+": "+res.Rule())
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = a.AppendTo(b)
	return append(b, '"')
}

func appendAddrs(b []byte, as []netip.Addr) []byte {
	b = append(b, '[')
	for i, a := range as {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = a.AppendTo(b)
		b = append(b, '"')
	}
	return append(b, ']')
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = httpapi.AppendJSONString(b, s)
	}
	return append(b, ']')
}
