package ipmapper

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/session"
)

func FuzzDecodeSetSession(f *testing.F) {
	for _, s := range []string{
		`{"session":{"id":"a","org":"o","revision":3,"allocations":["10.0.0.0/8","2001:db8::/32"],"username":"u","opaque_id":"x"},"ttl_seconds":60}`,
		`{"session":{"id":"a","org":"o"},"ttl_seconds":-1}`,
		`{"session":{"id":"a","org":"o","allocations":["10.0.0.1/8"]}}`,
		`{"session":{"id":"a.b","org":"o"}}`,
		`{"session":{"id":"a","org":"o","expires_at":"2026-01-01T00:00:00Z"}}`,
		`{"session":{}}`, `{}`, `[]`, `null`, ``, `{"session":{"id":"a","org":"o"}}x`,
	} {
		f.Add([]byte(s))
	}
	stored := &session.Session{ID: "a", Org: "o", OpaqueID: "x", Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeSetSession(data)
		if err != nil {
			return
		}
		if err := req.Session.Validate(); err != nil {
			t.Fatalf("accepted an invalid session: %v", err)
		}
		if req.TTLSeconds < -1 || req.TTLSeconds > maxTTLSeconds {
			t.Fatalf("accepted ttl %d", req.TTLSeconds)
		}
		for _, base := range []*session.Session{nil, stored} {
			out, _, err := merge(base, &req.Session, req.TTLSeconds, now)
			if err != nil {
				continue
			}
			if err := out.Validate(); err != nil {
				t.Fatalf("merge produced an invalid session: %v", err)
			}
			if base != nil && out.OpaqueID != base.OpaqueID {
				t.Fatalf("merge changed opaque_id %q -> %q", base.OpaqueID, out.OpaqueID)
			}
			b, err := json.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			var back session.Session
			if err := json.Unmarshal(b, &back); err != nil || back.ID != out.ID {
				t.Fatalf("stored value does not decode: %v", err)
			}
		}
	})
}

func FuzzDecodeSetSessionBatch(f *testing.F) {
	for _, s := range []string{
		`{"sessions":[{"id":"a","org":"o"},{"id":"","org":"o"}],"ttl_seconds":5}`,
		`{"sessions":[]}`, `{"sessions":null}`, `{"sessions":[1]}`, `{}`, `{"sessions":[{"id":"a"}],"x":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeSetSessionBatch(data)
		if err != nil {
			return
		}
		if req.Sessions == nil {
			t.Fatal("accepted a batch without sessions")
		}
		if err := validateTTL(req.TTLSeconds); err != nil {
			t.Fatalf("accepted ttl: %v", err)
		}
		for i := range req.Sessions {
			_ = validateSession(&req.Sessions[i]) // must not panic on any item
		}
	})
}

func FuzzDecodeGetSessions(f *testing.F) {
	for _, s := range []string{
		`{"id":"a"}`, `{"ip":"10.0.0.1"}`, `{"ip":"::ffff:10.0.0.1"}`, `{"ip":"fe80::1%eth0"}`,
		`{"org":"o","after":"x"}`, `{"username":"u"}`, `{"deviceid":"d"}`, `{"id":"a","org":"b"}`, `{}`, `{"ip":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := decodeGetSessions(data)
		if err != nil {
			return
		}
		switch q.kind {
		case "ip":
			if !q.ip.IsValid() || q.ip.Zone() != "" || q.ip.Is4In6() {
				t.Fatalf("accepted ip %v", q.ip)
			}
		case "id", "org", "username", "deviceid":
			if q.value == "" {
				t.Fatalf("accepted an empty %s", q.kind)
			}
		default:
			t.Fatalf("unknown query kind %q", q.kind)
		}
	})
}

func FuzzDecodeCleanSessions(f *testing.F) {
	for _, s := range []string{
		`{"org":"o","all":true}`, `{"org":"o","revision_below":4}`, `{"org":"o","subnets":["10.0.0.0/8","2001:db8::1/32"]}`,
		`{"ids":["a","b"]}`, `{"org":"o","ids":["a"]}`, `{"org":"o"}`, `{}`, `{"ids":[]}`, `{"org":"o","subnets":[]}`,
		`{"org":"o","all":true,"revision_below":2}`, `{"subnets":["10.0.0.0/8"]}`, `{"org":"o","subnets":[""]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, mode, err := decodeCleanSessions(data)
		if err != nil {
			return
		}
		// Never "remove everything": every accepted request is bounded by
		// an org or by a list of ids.
		switch mode {
		case wire.CleanByOrg:
			if req.Org == "" || !req.All {
				t.Fatalf("org clean accepted: %+v", req)
			}
		case wire.CleanByRevision:
			if req.Org == "" || req.RevisionBelow <= 0 {
				t.Fatalf("revision clean accepted: %+v", req)
			}
		case wire.CleanBySubnets:
			if req.Org == "" || len(req.Subnets) == 0 {
				t.Fatalf("subnet clean accepted: %+v", req)
			}
			for _, p := range req.Subnets {
				if !p.IsValid() || p != p.Masked() {
					t.Fatalf("subnet %v not valid and masked", p)
				}
			}
		case wire.CleanByIDs:
			if len(req.IDs) == 0 {
				t.Fatal("ids clean without ids")
			}
			for _, id := range req.IDs {
				if !session.ValidID(id) {
					t.Fatalf("accepted id %q", id)
				}
			}
		default:
			t.Fatalf("accepted with mode %d", mode)
		}
	})
}
