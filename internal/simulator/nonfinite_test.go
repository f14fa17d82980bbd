package simulator

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// TestNonFiniteResult: an operator script whose result holds NaN, +Inf or
// -Inf deep in a table gets a 500 {"error": …} naming where, over HTTP and
// over NATS, each counted as a call error and logged, never a 200 with an
// empty body.
func TestNonFiniteResult(t *testing.T) {
	file := writeScript(t, `
local svcpf = require("svcpf")
local bad = {nan = 0/0, inf = 1/0, ninf = -1/0}
function lookup_domain(req)
  local r = svcpf.lookup_domain(req)
  local v = bad[req.path and string.sub(req.path, 2) or ""]
  if v then r.extra = {deep = {1, {value = v}}} end
  return r
end
function simulate_user(req)
  local r = svcpf.simulate_user(req)
  r.score = {bad[req.vhost]}
  return r
end
function codemappings() return svcpf.codemappings() end
function maintenance() return {} end
function info() return svcpf.info() end
`)
	var logs natstest.LogBuffer
	f := newFixture(t, fixtureOpts{file: file, log: slog.New(slog.NewTextHandler(&logs, nil))})
	bus := natstest.Start(t)
	stop, err := f.svc.ServeNATS(NATSConfig{Conn: bus.NC})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	errorsOf := func(call string) float64 { return testutil.ToFloat64(f.svc.metrics.callErrors.WithLabelValues(call)) }

	// The same script answers normally without a bad value.
	if code, m := f.get("/api/v1/domain?domain=bad.example&path=/ok"); code != 200 || m["domain"] != "bad.example" {
		t.Fatalf("finite result: %d %v", code, m)
	}
	for _, tt := range []struct{ key, text string }{{"nan", "NaN"}, {"inf", "+Inf"}, {"ninf", "-Inf"}} {
		before := errorsOf(CallLookupDomain)
		code, m := f.get("/api/v1/domain?domain=bad.example&path=/" + tt.key)
		want := ".extra.deep[2].value: the number " + tt.text + " has no JSON form"
		if e, _ := m["error"].(string); code != 500 || !strings.Contains(e, want) {
			t.Fatalf("HTTP %s: %d %v, want 500 naming %q", tt.key, code, m, want)
		}
		if got := errorsOf(CallLookupDomain) - before; got != 1 {
			t.Fatalf("HTTP %s: %v call errors counted, want 1", tt.key, got)
		}

		before = errorsOf(CallSimulateUser)
		reply, err := bus.NC.RequestMsg(natsMsg(NATSGroup+"."+NATSSimulate, `{"domain":"bad.example","vhost":"`+tt.key+`"}`, ""), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var nm map[string]any
		_ = json.Unmarshal(reply.Data, &nm)
		want = ".score[1]: the number " + tt.text + " has no JSON form"
		if e, _ := nm["error"].(string); reply.Header.Get("Nats-Service-Error-Code") != "500" || !strings.Contains(e, want) {
			t.Fatalf("NATS %s: %s %q, want a 500 naming %q", tt.key, reply.Header.Get("Nats-Service-Error-Code"), reply.Data, want)
		}
		if got := errorsOf(CallSimulateUser) - before; got != 1 {
			t.Fatalf("NATS %s: %v call errors counted, want 1", tt.key, got)
		}
	}
	out := logs.String()
	if n := strings.Count(out, `msg="simulator call failed" path=/api/v1/domain`); n != 3 {
		t.Errorf("%d HTTP failures logged, want 3:\n%s", n, out)
	}
	if n := strings.Count(out, `msg="simulator call failed" subject=svcpf.simulator.simulate`); n != 3 {
		t.Errorf("%d NATS failures logged, want 3:\n%s", n, out)
	}
}

// TestWriteBodyUnencodable: a value neither the appender nor encoding/json
// encodes is an error before the status is written, not a 200 with an
// empty body.
func TestWriteBodyUnencodable(t *testing.T) {
	var p bodyEncoders
	rec := httptest.NewRecorder()
	if err := p.writeBody(rec, CallLookupDomain, map[string]any{"x": []any{math.Inf(1)}}); err == nil {
		t.Fatal("+Inf encoded")
	}
	if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
		t.Fatalf("wrote %q with %v", rec.Body.String(), rec.Header())
	}
	if err := p.writeBody(rec, CallLookupDomain, map[string]any{"x": 1.5}); err != nil || rec.Body.String() != "{\"x\":1.5}\n" {
		t.Fatalf("finite: %q, %v", rec.Body.String(), err)
	}
}
