package rpz

import (
	"testing"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// TestDecideStep3: through the policy's evaluation (policy.DecideInto), an RPZ hit ends the evaluation
// at step 3 with reason rpz: after the allowlist, before the blocklist; a
// PASSTHRU allows and the blocklist is not consulted.
func TestDecideStep3(t *testing.T) {
	z := mustParse(t, "op", head+`
bad.example      CNAME .
pass.example     CNAME rpz-passthru.
garden.example   A     192.0.2.80
tcp.example      CNAME rpz-tcp-only.
`)
	doc, err := settings.Parse([]byte(`{"allowlist":["bad.example"],"blocklist":["pass.example","other.example"]}`))
	if err != nil {
		t.Fatal(err)
	}
	p := policy.CompileWith(settings.Merge(settings.Layer{Name: settings.LayerGlobal, Doc: doc}), policy.Options{})
	snap := newSnapshot(z)
	tests := []struct {
		name    string
		rpz     policy.RPZ
		reason  policy.Reason
		verdict policy.Verdict
		action  policy.Action
		rule    string
		result  Result
		rpzStep string
	}{
		// The allowlist comes first.
		{"bad.example", snap, policy.ReasonAllowlist, policy.VerdictAllow, policy.ActionAllow, "allowlist:bad.example", ResultNoAction, ""},
		{"www.bad.example", snap, policy.ReasonAllowlist, policy.VerdictAllow, policy.ActionAllow, "allowlist:bad.example", ResultNoAction, ""},
		// PASSTHRU beats the blocklist.
		{"pass.example", snap, policy.ReasonRPZ, policy.VerdictAllow, policy.ActionAllow, "rpz:op trigger=pass.example action=passthru", ResultNoAction, policy.ResultMatch},
		{"garden.example", snap, policy.ReasonRPZ, policy.VerdictRedirect, policy.ActionRedirect, "rpz:op trigger=garden.example action=redirect", ResultCustom, policy.ResultMatch},
		{"tcp.example", snap, policy.ReasonRPZ, policy.VerdictBlock, policy.ActionTruncate, "rpz:op trigger=tcp.example action=truncate", ResultTruncate, policy.ResultMatch},
		{"other.example", snap, policy.ReasonBlocklist, policy.VerdictBlock, policy.ActionNXDomain, "blocklist:other.example", ResultNoAction, policy.ResultNoMatch},
		{"pass.example", nil, policy.ReasonBlocklist, policy.VerdictBlock, policy.ActionNXDomain, "blocklist:pass.example", ResultNoAction, policy.ResultNotConfigured},
	}
	for _, tc := range tests {
		d := evaluate(policy.Input{Domain: tc.name, RPZ: tc.rpz}, p, nil)
		if d.Reason != tc.reason || d.Verdict != tc.verdict || d.Action != tc.action || d.Rule() != tc.rule {
			t.Errorf("%s: %s %s %s %q; want %s %s %s %q", tc.name, d.Reason, d.Verdict, d.Action, d.Rule(), tc.reason, tc.verdict, tc.action, tc.rule)
		}
		if got := ResultOf(&d); got != tc.result {
			t.Errorf("%s: ResultOf %d, want %d", tc.name, got, tc.result)
		}
		step := ""
		for _, e := range d.Trace {
			if e.Step == policy.ReasonRPZ {
				step = e.Result
			}
		}
		if step != tc.rpzStep {
			t.Errorf("%s: rpz trace %q, want %q (trace %v)", tc.name, step, tc.rpzStep, d.Trace)
		}
	}
	if d := evaluate(policy.Input{Domain: "garden.example", RPZ: snap}, p, nil); len(d.A) != 1 || d.A[0].String() != "192.0.2.80" {
		t.Errorf("local data A %v", d.A)
	}
}

// evaluate evaluates in against p into a new Decision, as the DNS path's
// policy.DecideInto does into a reused one.
func evaluate(in policy.Input, p *policy.Policy, cats policy.Categories) policy.Decision {
	d := policy.Decision{Trace: make([]policy.TraceEntry, 0, policy.TraceCap)}
	policy.DecideInto(&d, &in, p, cats)
	return d
}

func TestResultOf(t *testing.T) {
	for _, tc := range []struct {
		a policy.Action
		r Result
	}{{policy.ActionDrop, ResultDrop}, {policy.ActionNXDomain, ResultNXDomain}, {policy.ActionNoData, ResultNoData},
		{policy.ActionCNAME, ResultCustom}, {policy.ActionAllow, ResultNoAction}} {
		d := policy.Decision{Reason: policy.ReasonRPZ, Action: tc.a}
		if got := ResultOf(&d); got != tc.r {
			t.Errorf("%s: %d, want %d", tc.a, got, tc.r)
		}
	}
}
