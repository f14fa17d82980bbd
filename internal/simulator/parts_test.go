package simulator

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/policy"
)

// mapParts is how the nested parts were built before renderParts (maps
// through the body appender): the reference renderParts must match byte
// for byte.
func mapParts(res *policy.Result) map[string]any {
	s := &res.Subject
	id := map[string]any{"by": s.By, "ip": addrString(s.IP), "org": s.Org, "session_id": s.SessionID,
		"username": s.Username, "deviceid": s.DeviceID, "location": s.Location, "profile": nil}
	if s.HasProfile {
		id["profile"] = s.Profile
	}
	if len(s.Others) > 0 {
		id["other_sessions"] = stringsAny(s.Others)
	}
	trace := make([]any, 0)
	for _, st := range append(append([]policy.TraceEntry(nil), res.Steps...), res.Trace...) {
		trace = append(trace, map[string]any{"step": string(st.Step), "result": st.Result})
	}
	a := map[string]any{}
	switch res.Action {
	case policy.ActionAllow:
		a["rcode"], a["forwarded"] = "NOERROR", true
	case policy.ActionNXDomain:
		a["rcode"] = "NXDOMAIN"
	case policy.ActionNoData:
		a["rcode"] = "NOERROR"
		a["records"] = []any{}
	case policy.ActionRefused:
		a["rcode"] = "REFUSED"
	case policy.ActionDrop:
		a["dropped"] = true
	case policy.ActionTruncate:
		a["truncated"] = true
	case policy.ActionRedirect:
		a["rcode"] = "NOERROR"
		a["a"], a["aaaa"] = addrsAny(res.A), addrsAny(res.AAAA)
		if len(res.TXT) > 0 {
			a["txt"] = stringsAny(res.TXT)
		}
	case policy.ActionCNAME:
		a["rcode"], a["cname"] = "NOERROR", res.Target
	}
	if res.EDE != 0 {
		a["ede"] = map[string]any{"code": int(res.EDE), "text": string(res.Reason) + ": " + res.Rule()}
	}
	return map[string]any{"identity": id, "categories": categories(res.Categories),
		"layers": stringsAny(res.Layers), "answer": a, "trace": trace}
}

func TestRenderPartsMatchesMaps(t *testing.T) {
	cats := []feed.Category{{Code: 3, Title: "malware \"x\" <b>", Feed: "threats", Name: "bad.example", Path: "/p"},
		{Code: 40, Feed: "f\u2028", Name: "x.example"}}
	base := policy.Result{
		Subject: policy.Subject{By: policy.ByUsername, IP: netip.MustParseAddr("10.0.0.1"), Org: "acme",
			SessionID: "s1", Attributes: identity.Attributes{Username: "alice\n", DeviceID: "mac:0a", Location: "hq"},
			Profile: 2, HasProfile: true, Others: []string{"s2", "s3"}},
		Layers: []string{"global", "org:acme"},
		Steps:  []policy.TraceEntry{{Step: policy.StepIdentity, Result: "by username"}},
	}
	base.Decision = policy.Decision{Categories: cats, Trace: []policy.TraceEntry{{Step: policy.ReasonAllowlist, Result: "no match"}}}
	var cases []policy.Result
	for _, act := range []policy.Action{policy.ActionAllow, policy.ActionNXDomain, policy.ActionNoData, policy.ActionRefused,
		policy.ActionDrop, policy.ActionTruncate, policy.ActionRedirect, policy.ActionCNAME} {
		r := base
		r.Action, r.Reason, r.EDE = act, policy.ReasonCategory, 15
		r.A = []netip.Addr{netip.MustParseAddr("192.0.2.1")}
		r.AAAA = []netip.Addr{netip.MustParseAddr("2001:db8::1")}
		r.TXT = []string{"why"}
		r.Target = "safe.example"
		cases = append(cases, r)
	}
	none := policy.Result{Subject: policy.Subject{By: policy.ByNone}}
	none.Action, none.Reason = policy.ActionRedirect, policy.ReasonBlocklist
	none.SetRule("blocklist:a.example")
	cases = append(cases, none)

	for i := range cases {
		res := &cases[i]
		want, err := AppendBody(nil, CallSimulateUser, mapParts(res))
		if err != nil {
			t.Fatal(err)
		}
		p := renderParts(res)
		got, err := AppendBody(nil, CallSimulateUser, map[string]any{"identity": p.identity,
			"categories": p.categories, "layers": p.layers, "answer": p.answer, "trace": p.trace})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("case %d (%s):\n got %s\nwant %s", i, res.Action, got, want)
		}
		checkBody(t, res, "a.example", []string{"", "/p"}[i%2], []any{nil, []any{"line 1", "<2>"}}[i%2])
	}
}

// checkBody: a simulateBody writes the bytes of the map body it replaced
// (the parts rendered, the other fields as simulateUser set them), as
// does the map of its Keys and Fields (what a script that changes a field
// hands back) and encoding/json as httpapi.WriteJSON runs it (MarshalJSON).
func checkBody(t *testing.T, res *policy.Result, domain, path string, log any) {
	t.Helper()
	settings := json.RawMessage(`{"filtering":true,"blocklist":["x<y>"]}`)
	p := renderParts(res)
	old := map[string]any{
		"domain": domain, "verdict": string(res.Verdict), "action": string(res.Action),
		"reason": string(res.Reason), "rule": res.Rule(), "identity": p.identity,
		"categories": p.categories, "settings": settings,
		"layers": p.layers, "answer": p.answer, "trace": p.trace,
		"fingerprint": res.Fingerprint,
	}
	if path != "" {
		old["path"] = path
	}
	body := &simulateBody{domain: domain, path: path, res: *res, settings: settings}
	if log != nil {
		old["log"] = log
		body.log = log.([]any)
	}
	want, err := AppendBody(nil, CallSimulateUser, old)
	if err != nil {
		t.Fatal(err)
	}
	got, err := AppendBody(nil, CallSimulateUser, body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("body:\n got %s\nwant %s", got, want)
	}
	fields := map[string]any{}
	for _, k := range body.Keys() {
		fields[k], _ = body.Field(k)
	}
	if got, err = AppendBody(nil, CallSimulateUser, fields); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("body's fields (%v):\n got %s\nwant %s", err, got, want)
	}
	var buf bytes.Buffer // as httpapi.WriteJSON encodes: no HTML escaping
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err = enc.Encode(body); err != nil || !bytes.Equal(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), want) {
		t.Fatalf("encoding/json (%v):\n got %s\nwant %s", err, buf.Bytes(), want)
	}
	if _, ok := body.Field("no_such_key"); ok {
		t.Fatal("a field the body does not have")
	}
}

// FuzzRenderParts checks renderParts against the maps it replaced for any
// strings (escaping, invalid UTF-8, U+2028) in every field it renders.
func FuzzRenderParts(f *testing.F) {
	f.Add("acme", "alice", "mac:0a", "by username", "category:3 feed=x key=y", "bad.example", "/p", uint16(3), true)
	f.Add("\x00\"\\", "\xff\u2028", "", "<b>&</b>", "", "", "", uint16(0), false)
	f.Fuzz(func(t *testing.T, org, user, dev, result, rule, name, path string, code uint16, profile bool) {
		res := policy.Result{
			Subject: policy.Subject{By: policy.ByIP, IP: netip.MustParseAddr("2001:db8::2"), Org: org, SessionID: user + dev,
				Attributes: identity.Attributes{Username: user, DeviceID: dev, Location: result},
				Profile:    int(code), HasProfile: profile, Others: []string{org, rule}},
			Layers: []string{org, user},
			Steps:  []policy.TraceEntry{{Step: policy.StepIdentity, Result: result}},
			EDE:    code,
		}
		res.Decision = policy.Decision{Action: policy.ActionCNAME, Reason: policy.Reason(result), Target: name,
			Categories: []feed.Category{{Code: code, Title: result, Feed: org, Name: name, Path: path}},
			Trace:      []policy.TraceEntry{{Step: policy.Reason(rule), Result: result}}}
		res.SetRule(rule)
		want, err := AppendBody(nil, CallSimulateUser, mapParts(&res))
		if err != nil {
			t.Fatal(err)
		}
		p := renderParts(&res)
		got, err := AppendBody(nil, CallSimulateUser, map[string]any{"identity": p.identity,
			"categories": p.categories, "layers": p.layers, "answer": p.answer, "trace": p.trace})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("got %s\nwant %s", got, want)
		}
		checkBody(t, &res, name, path, []any{rule, result})
	})
}

// parts are the rendered nested values of one simulate body.
type parts struct {
	identity, categories, layers, answer, trace json.RawMessage
}

// renderParts renders res's nested values into one buffer, as the body
// did before the body object (body.go) rendered each where needed: the
// reference the tests compare the body object and the maps with.
func renderParts(res *policy.Result) parts {
	b := make([]byte, 0, 1024)
	var ends [5]int
	b = appendIdentity(b, &res.Subject)
	ends[0] = len(b)
	b = appendCategories(b, res.Categories)
	ends[1] = len(b)
	b = appendStrings(b, res.Layers)
	ends[2] = len(b)
	b = appendAnswer(b, res)
	ends[3] = len(b)
	b = appendTrace(b, res)
	ends[4] = len(b)
	cut := func(i int) json.RawMessage {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		return json.RawMessage(b[start:ends[i]:ends[i]])
	}
	return parts{identity: cut(0), categories: cut(1), layers: cut(2), answer: cut(3), trace: cut(4)}
}

// The reference's conversions of values to the maps' any.

func addrString(a netip.Addr) any {
	if !a.IsValid() {
		return nil
	}
	return a.String()
}

func addrsAny(as []netip.Addr) []any {
	out := make([]any, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

func stringsAny(ss []string) []any {
	out := make([]any, 0, len(ss))
	for _, s := range ss {
		out = append(out, s)
	}
	return out
}
