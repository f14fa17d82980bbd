package ipmapper

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
)

// Bounds of GET /sessions' limit: the default keeps an accidental query
// of a large organisation cheap; the maximum bounds one reply's size.
const (
	SessionsDefaultLimit = 100
	SessionsMaxLimit     = 10000
)

// HandleSessions is GET /sessions?ip=|org=|username=|deviceid=|id=
// [&limit=N][&after=ID][&producer=P]: what the table holds, read-only, for an operator
// (docs/ipmapper.md, "Inspecting the table").
func (s *Service) HandleSessions(w http.ResponseWriter, r *http.Request) {
	// Not r.URL.Query(): it drops a malformed pair silently, and a query
	// answered for a different selector than the operator typed is worse
	// than a 400.
	vals, err := httpapi.ParseQuery(r.URL.RawQuery)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var q Query
	limit := SessionsDefaultLimit
	for key, vs := range vals {
		if len(vs) != 1 {
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("query parameter %q given %d times", key, len(vs)))
			return
		}
		v := vs[0]
		switch key {
		case "id":
			q.ID = v
		case "org":
			q.Org = v
		case "username":
			q.Username = v
		case "deviceid":
			q.DeviceID = v
		case "after":
			q.After = v
		case "producer":
			// Present and empty selects the orgmanager's sessions.
			q.ByProducer, q.Producer = true, v
		case "ip":
			ip, err := netip.ParseAddr(v)
			if err != nil {
				httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("ip %q: not an IP address", v))
				return
			}
			q.IP = ip
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > SessionsMaxLimit {
				httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want 1..%d", v, SessionsMaxLimit))
				return
			}
			limit = n
		default:
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q (want one of id, ip, org, username, deviceid; limit, after, producer)", key))
			return
		}
	}
	if !s.Ready() {
		msg := "the session table is loading"
		if ha := s.HA(); ha.Role == RoleStandby {
			msg = "this IP Mapper is on standby; the one holding the lock of bucket " + s.cfg.Bucket + " serves it"
			if ha.Holder != "" {
				msg += ": " + ha.Holder
			}
		}
		httpapi.WriteError(w, http.StatusServiceUnavailable, msg)
		return
	}
	found, err := s.Find(q, limit)
	if err != nil {
		if IsInvalid(err) {
			httpapi.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		httpapi.WriteInternal(w, r, s.log, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, wire.SessionsReply{Sessions: found.Sessions, Count: len(found.Sessions),
		Total: found.Total, Limit: limit, Next: found.Next})
}
