package luapool

import (
	"context"
	"testing"
)

// benchRequest is shaped like the simulator's request table: ten parameters.
func benchRequest() map[string]any {
	return map[string]any{
		"domain": "www.example.com", "path": "/index.html", "ip": "192.0.2.10", "username": "alice",
		"deviceid": "imei:490154203237518", "profile": 3, "rules_ip": "198.51.100.7", "verbose": false,
		"vhost": "edge-1", "settings": `{"filtering":true}`,
	}
}

// benchScript builds a fifteen-field nested result the way a simulate body
// looks (docs/simulator.md, Bodies).
const benchScript = `
local m = require("svcpf")
function simulate(req)
  return {
    domain = req.domain, path = req.path, verdict = "block", action = "nxdomain",
    reason = "category", rule = "category:7",
    identity = {by = "username", ip = req.ip, org = "acme", session_id = "s-1",
      username = req.username, deviceid = req.deviceid, location = "hq", profile = req.profile},
    categories = {{code = 7, title = "Ads", feed = "main", match = "example.com"}},
    settings = {filtering = true, blocked_categories = {7, 9}},
    layers = {"global", "org:acme", "username:alice"},
    answer = {rcode = "NXDOMAIN"},
    trace = {{step = "identity", result = "username"}, {step = "category", result = "7"}},
    fingerprint = "abc123", verbose = req.verbose,
  }
end
function through_builtin(req) return m.simulate(req) end
`

// benchResult is the same body built in Go, for the built-in path.
func benchResult(req map[string]any) map[string]any {
	return map[string]any{
		"domain": req["domain"], "path": req["path"], "verdict": "block", "action": "nxdomain",
		"reason": "category", "rule": "category:7",
		"identity": map[string]any{"by": "username", "ip": req["ip"], "org": "acme", "session_id": "s-1",
			"username": req["username"], "deviceid": req["deviceid"], "location": "hq", "profile": req["profile"]},
		"categories":  []any{map[string]any{"code": 7, "title": "Ads", "feed": "main", "match": "example.com"}},
		"settings":    map[string]any{"filtering": true, "blocked_categories": []any{7, 9}},
		"layers":      []any{"global", "org:acme", "username:alice"},
		"answer":      map[string]any{"rcode": "NXDOMAIN"},
		"trace":       []any{map[string]any{"step": "identity", "result": "username"}, map[string]any{"step": "category", "result": "7"}},
		"fingerprint": "abc123", "verbose": req["verbose"],
	}
}

func benchPool(b *testing.B) *Pool {
	return newTestPool(b, Config{Workers: 2, Modules: map[string]Module{"svcpf": {
		"simulate": func(_ context.Context, args []any) (any, error) {
			return benchResult(args[0].(map[string]any)), nil
		},
	}}}, benchScript)
}

// BenchmarkCall: the request converted to Lua, a result table built by the
// script and converted back; two workers, parallel callers.
func BenchmarkCall(b *testing.B) {
	benchmarkCall(b, "simulate")
}

// BenchmarkCallThroughBuiltin: the default entry script's shape, where the
// script hands the request to a Go built-in and returns its result, so the
// request and the result each cross the boundary twice.
func BenchmarkCallThroughBuiltin(b *testing.B) {
	benchmarkCall(b, "through_builtin")
}

func benchmarkCall(b *testing.B, fn string) {
	p := benchPool(b)
	req := benchRequest()
	if _, err := p.Call(context.Background(), fn, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := p.Call(ctx, fn, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
