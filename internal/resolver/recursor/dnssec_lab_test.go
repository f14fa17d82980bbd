package recursor_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/dnslab"
	"github.com/svc-pf/svc-pf/internal/promtest"
	"github.com/svc-pf/svc-pf/internal/resolver/dnssec"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
)

// secCase is a lab name with what the validator must say (besides
// agreeing with unbound) and, when bogus, the extended error code.
type secCase struct {
	name  string
	qtype uint16
	state dnssec.State
	ede   uint16
}

var secCases = []secCase{
	{"www.secure.test.", dns.TypeA, dnssec.Secure, 0},
	{"nx.secure.test.", dns.TypeA, dnssec.Secure, 0},
	{"www.secure.test.", dns.TypeTXT, dnssec.Secure, 0},
	{"foo.wild.secure.test.", dns.TypeA, dnssec.Secure, 0},
	{"a.b.wild.secure.test.", dns.TypeTXT, dnssec.Secure, 0},
	{"c1.secure.test.", dns.TypeA, dnssec.Secure, 0},
	{"c1.secure.test.", dns.TypeTXT, dnssec.Secure, 0},
	{"secure.test.", dns.TypeMX, dnssec.Secure, 0},
	{"www.sub.secure.test.", dns.TypeA, dnssec.Secure, 0},
	{"nx.sub.secure.test.", dns.TypeA, dnssec.Secure, 0},
	{"secure.test.", dns.TypeDS, dnssec.Secure, 0},
	{"insecure.test.", dns.TypeDS, dnssec.Secure, 0},
	{"www.test.", dns.TypeA, dnssec.Secure, 0},
	{"nosuch.", dns.TypeA, dnssec.Secure, 0},
	{"www.nsec3.test.", dns.TypeA, dnssec.Secure, 0},
	{"nx.nsec3.test.", dns.TypeA, dnssec.Secure, 0},
	{"www.nsec3.test.", dns.TypeTXT, dnssec.Secure, 0},
	{"a.wild.nsec3.test.", dns.TypeA, dnssec.Secure, 0},
	{"www.optout.test.", dns.TypeA, dnssec.Secure, 0},
	{"www.child.optout.test.", dns.TypeA, dnssec.Insecure, 0},
	{"www.insecure.test.", dns.TypeA, dnssec.Insecure, 0},
	{"toinsecure.secure.test.", dns.TypeA, dnssec.Insecure, 0},
	{"tonx.secure.test.", dns.TypeA, dnssec.Insecure, 0},
	{"back.insecure.test.", dns.TypeA, dnssec.Insecure, 0},
	{"www.dname.secure.test.", dns.TypeA, dnssec.Insecure, 0},
	{"www.example.", dns.TypeA, dnssec.Insecure, 0},
	{"www.outofzone.test.", dns.TypeA, dnssec.Insecure, 0},
	{"www.island.test.", dns.TypeA, dnssec.Insecure, 0},
	{"www.expired.test.", dns.TypeA, dnssec.Bogus, dns.ExtendedErrorCodeSignatureExpired},
	{"www.future.test.", dns.TypeA, dnssec.Bogus, dns.ExtendedErrorCodeSignatureNotYetValid},
	{"www.wrongds.test.", dns.TypeA, dnssec.Bogus, dns.ExtendedErrorCodeDNSKEYMissing},
	{"www.badsig.test.", dns.TypeA, dnssec.Bogus, dns.ExtendedErrorCodeDNSBogus},
	{"txt.badsig.test.", dns.TypeTXT, dnssec.Secure, 0},
	{"www.nosig.test.", dns.TypeA, dnssec.Bogus, dns.ExtendedErrorCodeRRSIGsMissing},
}

// TestLabMatchesValidatingUnbound resolves every lab name with the
// validating recursor and both validating reference resolvers (unbound and
// PowerDNS Recursor) on the same hints and trust anchor: same rcode, AD bit
// and answer records; and the validation state and extended error code
// each name must have.
func TestLabMatchesValidatingUnbound(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	lab := dnslab.Start(t, dnslab.Standard())
	refs := startReferences(lab, true)
	cases := slices.Clone(secCases)
	for _, c := range labCases {
		cases = append(cases, secCase{name: c.name, qtype: c.qtype, state: 255})
	}
	for _, qmin := range []bool{true, false} {
		t.Run(fmt.Sprintf("qmin=%v", qmin), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			r := newLabRecursor(t, lab.Hints, func(c *recursor.Config) {
				c.Registerer = reg
				c.NoQNAMEMinimisation = !qmin
				c.DNSSEC = recursor.ModeValidate
				c.TrustAnchors = lab.TrustAnchor
			})
			ctx := context.Background()
			for _, c := range cases {
				want := referenceAnswer(t, refs, c.name, c.qtype)
				q := question(c.name, c.qtype)
				q.SetEdns0(1232, true)
				got, res, err := r.Resolve(ctx, q)
				gotRcode, gotAD := dns.RcodeServerFailure, false
				var gotAns []string
				if err == nil {
					gotRcode, gotAD, gotAns = got.Rcode, got.AuthenticatedData, rrset(got.Answer)
				} else if !errors.Is(err, recursor.ErrAllFailed) {
					t.Errorf("%s %s: error not ErrAllFailed: %v", c.name, dns.TypeToString[c.qtype], err)
				}
				label := c.name + " " + dns.TypeToString[c.qtype]
				if gotRcode != want.rcode || gotAD != want.ad || !slices.Equal(gotAns, want.ans) {
					t.Errorf("%s:\n got %s AD=%v %q (%v, err %v)\nwant %s", label,
						dns.RcodeToString[gotRcode], gotAD, gotAns, res, err, want)
					continue
				}
				if c.state == 255 {
					continue
				}
				if res.State != c.state || res.EDE != c.ede {
					t.Errorf("%s: %s EDE %d (%s), want %s EDE %d", label, res.State, res.EDE, res.Reason, c.state, c.ede)
				}
				var ve *recursor.ValidationError
				if c.state == dnssec.Bogus && (!errors.As(err, &ve) || ve.EDE() != c.ede) {
					t.Errorf("%s: error %v, want a ValidationError with EDE %d", label, err, c.ede)
				}
			}
			counts := r.DNSSECCounters()
			t.Logf("counters %v", counts)
			if counts["dnssec-result-secure"] == 0 || counts["dnssec-result-insecure"] == 0 || counts["dnssec-result-bogus"] == 0 ||
				counts["dnssec-validations"] != counts["dnssec-result-secure"]+counts["dnssec-result-insecure"]+
					counts["dnssec-result-bogus"]+counts["dnssec-result-indeterminate"]+counts["dnssec-result-nta"] {
				t.Errorf("counters %v", counts)
			}
			if v := promtest.Value(t, reg, "svcpf_recursor_dnssec_results_total", "result", "bogus"); v != float64(counts["dnssec-result-bogus"]) {
				t.Errorf("svcpf_recursor_dnssec_results_total{bogus} %v, counters say %d", v, counts["dnssec-result-bogus"])
			}
		})
	}
}

// TestWildcardProofAttached: a DO client's answer from a wildcard in a
// signed zone carries, beside the expanded records and their signature,
// the NSEC or NSEC3 proof that the name asked does not exist (RFC 4035
// 3.1.3.3), signed, as the authoritative server sent it: without it a
// validating client would find the answer bogus. A plain answer carries
// no proof, and a client without DO gets neither.
func TestWildcardProofAttached(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	lab := dnslab.Start(t, dnslab.Standard())
	r := newLabRecursor(t, lab.Hints, func(c *recursor.Config) {
		c.DNSSEC = recursor.ModeValidate
		c.TrustAnchors = lab.TrustAnchor
	})
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		proof uint16 // 0: none expected
	}{
		{"anything.wild.secure.test.", dns.TypeNSEC},
		{"other.wild.nsec3.test.", dns.TypeNSEC3},
		{"www.secure.test.", 0},
	} {
		for _, do := range []bool{true, false} {
			q := question(c.name, dns.TypeA)
			q.SetEdns0(1232, do)
			m, res, err := r.Resolve(ctx, q)
			if err != nil || res.State != dnssec.Secure || len(m.Answer) == 0 {
				t.Fatalf("%s DO=%v: %v %v %v", c.name, do, m, res, err)
			}
			var proofs, sigs int
			for _, rr := range m.Ns {
				switch h := rr.Header(); {
				case c.proof != 0 && h.Rrtype == c.proof:
					proofs++
				case h.Rrtype == dns.TypeRRSIG && c.proof != 0 && rr.(*dns.RRSIG).TypeCovered == c.proof:
					sigs++
				default:
					t.Errorf("%s DO=%v: unexpected authority record %v", c.name, do, rr)
				}
			}
			want := c.proof != 0 && do
			if (proofs > 0) != want || (sigs > 0) != want {
				t.Errorf("%s DO=%v: %d %s records and %d signatures over them in the authority section, want them: %v\n%v",
					c.name, do, proofs, dns.TypeToString[c.proof], sigs, want, m)
			}
		}
	}
}

// TestCDMatchesReferences asks every DNSSEC case with CD (checking
// disabled), with DO and with AD alone, of the validating recursor and
// both validating references: bogus names answer their data without AD,
// secure ones keep AD, as unbound answers (the recorded difference with
// pdns_recursor aside); the validator still ran and counted them bogus.
func TestCDMatchesReferences(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	lab := dnslab.Start(t, dnslab.Standard())
	refs := startReferences(lab, true)
	r := newLabRecursor(t, lab.Hints, func(c *recursor.Config) {
		c.DNSSEC, c.TrustAnchors = recursor.ModeValidate, lab.TrustAnchor
	})
	bogus := 0
	for _, c := range secCases {
		for _, do := range []bool{true, false} {
			q := question(c.name, c.qtype)
			q.RecursionDesired, q.CheckingDisabled = true, true
			if do {
				q.SetEdns0(1232, true)
			} else {
				q.AuthenticatedData = true
			}
			want := referenceAnswerTo(t, refs, q)
			got, res, err := r.Resolve(context.Background(), q)
			label := fmt.Sprintf("%s %s CD DO=%v", c.name, dns.TypeToString[c.qtype], do)
			if err != nil {
				t.Errorf("%s: %v (%v); want %s", label, err, res, want)
				continue
			}
			if got.Rcode != want.rcode || got.AuthenticatedData != want.ad || !got.CheckingDisabled || !slices.Equal(rrset(got.Answer), want.ans) {
				t.Errorf("%s:\n got %s AD=%v CD=%v %q (%v)\nwant %s", label, dns.RcodeToString[got.Rcode], got.AuthenticatedData,
					got.CheckingDisabled, rrset(got.Answer), res, want)
			}
			if res.State != c.state {
				t.Errorf("%s: validated %s, want %s", label, res.State, c.state)
			}
			if c.state == dnssec.Bogus {
				bogus++
				if do && !hasType(got.Answer, dns.TypeRRSIG) && c.ede != dns.ExtendedErrorCodeRRSIGsMissing {
					t.Errorf("%s: bogus data without its RRSIGs for a DO client:\n%v", label, got)
				}
			}
		}
	}
	if n := r.DNSSECCounters()["dnssec-result-bogus"]; n != uint64(bogus) {
		t.Errorf("dnssec-result-bogus %d, want the %d bogus answers given with CD", n, bogus)
	}
}

// resolveDO asks r with the DO bit (and AD when ad) and returns the
// answer (nil on error), the validation result and the error.
func resolveDO(t *testing.T, r *recursor.Recursor, name string, qtype uint16, do, ad bool) (*dns.Msg, dnssec.Result, error) {
	t.Helper()
	q := question(name, qtype)
	if do {
		q.SetEdns0(1232, true)
	}
	q.AuthenticatedData = ad
	return r.Resolve(context.Background(), q)
}

func hasType(rrs []dns.RR, t uint16) bool {
	return slices.ContainsFunc(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype == t })
}

// TestDNSSECModes: negative trust anchors, process mode (validation only
// for clients asking with DO or AD), off, a DNSKEY trust anchor, and the
// built-in root anchors (which the lab's root does not match: bogus).
func TestDNSSECModes(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	lab := dnslab.Start(t, dnslab.Standard())
	mk := func(mode recursor.Mode, anchors string, nta ...string) *recursor.Recursor {
		return newLabRecursor(t, lab.Hints, func(c *recursor.Config) {
			c.DNSSEC, c.TrustAnchors, c.NTA = mode, anchors, nta
		})
	}
	type want struct {
		rcode int
		ad    bool
		state dnssec.State
		sigs  bool
	}
	check := func(t *testing.T, r *recursor.Recursor, name string, do, ad bool, w want) {
		t.Helper()
		m, res, err := resolveDO(t, r, name, dns.TypeA, do, ad)
		rcode, gotAD, sigs := dns.RcodeServerFailure, false, false
		if err == nil {
			rcode, gotAD, sigs = m.Rcode, m.AuthenticatedData, hasType(m.Answer, dns.TypeRRSIG)
		}
		if rcode != w.rcode || gotAD != w.ad || res.State != w.state || sigs != w.sigs {
			t.Errorf("%s (DO %v AD %v): %s AD=%v %s RRSIGs=%v (%v); want %s AD=%v %s RRSIGs=%v", name, do, ad,
				dns.RcodeToString[rcode], gotAD, res.State, sigs, err, dns.RcodeToString[w.rcode], w.ad, w.state, w.sigs)
		}
	}
	ok, servfail := dns.RcodeSuccess, dns.RcodeServerFailure
	t.Run("nta", func(t *testing.T) {
		r := mk(recursor.ModeValidate, lab.TrustAnchor, "expired.test", "WrongDS.test.", "www.badsig.test.")
		// An NTA on a name inside a zone, not a zone.
		check(t, r, "www.badsig.test.", true, false, want{ok, false, dnssec.Insecure, true})
		check(t, r, "www.expired.test.", true, false, want{ok, false, dnssec.Insecure, true})
		check(t, r, "www.wrongds.test.", true, false, want{ok, false, dnssec.Insecure, true})
		check(t, r, "www.future.test.", true, false, want{servfail, false, dnssec.Bogus, false})
		check(t, r, "www.secure.test.", true, false, want{ok, true, dnssec.Secure, true})
		if c := r.DNSSECCounters(); c["dnssec-result-nta"] != 3 || c["dnssec-result-insecure"] != 0 || c["dnssec-validations"] != 5 {
			t.Errorf("counters %v: want 3 nta of 5 validations", c)
		}
	})
	t.Run("process", func(t *testing.T) {
		r := mk(recursor.ModeProcess, lab.TrustAnchor)
		check(t, r, "www.expired.test.", false, false, want{ok, false, dnssec.Indeterminate, false})
		check(t, r, "www.expired.test.", true, false, want{servfail, false, dnssec.Bogus, false})
		check(t, r, "www.expired.test.", false, true, want{servfail, false, dnssec.Bogus, false})
		check(t, r, "www.secure.test.", false, false, want{ok, false, dnssec.Indeterminate, false})
		check(t, r, "www.secure.test.", true, false, want{ok, true, dnssec.Secure, true})
		check(t, r, "www.secure.test.", false, true, want{ok, true, dnssec.Secure, false})
	})
	t.Run("validate", func(t *testing.T) {
		r := mk(recursor.ModeValidate, lab.TrustAnchor)
		// Validated for every client; AD only for those that ask (DO or AD).
		check(t, r, "www.expired.test.", false, false, want{servfail, false, dnssec.Bogus, false})
		check(t, r, "www.secure.test.", false, false, want{ok, false, dnssec.Secure, false})
		check(t, r, "www.insecure.test.", true, false, want{ok, false, dnssec.Insecure, false})
	})
	t.Run("off", func(t *testing.T) {
		r := mk(recursor.ModeOff, lab.TrustAnchor)
		check(t, r, "www.expired.test.", true, true, want{ok, false, dnssec.Indeterminate, false})
		check(t, r, "www.secure.test.", true, true, want{ok, false, dnssec.Indeterminate, false})
	})
	t.Run("dnskey-anchor", func(t *testing.T) {
		m, err := dnslab.Query(context.Background(), netip.AddrPortFrom(lab.Addr("root"), 53), ".", dns.TypeDNSKEY, false)
		if err != nil {
			t.Fatal(err)
		}
		var text string
		for _, rr := range m.Answer {
			if k, isKey := rr.(*dns.DNSKEY); isKey && k.Flags&dns.SEP != 0 {
				text += k.String() + "\n"
			}
		}
		if text == "" {
			t.Fatalf("no KSK in the lab root's DNSKEY answer:\n%v", m)
		}
		r := mk(recursor.ModeValidate, text)
		check(t, r, "www.secure.test.", true, false, want{ok, true, dnssec.Secure, true})
		check(t, r, "www.badsig.test.", true, false, want{servfail, false, dnssec.Bogus, false})
	})
	t.Run("builtin-anchor", func(t *testing.T) {
		// The lab's root is not IANA's: its keys match no built-in DS.
		r := mk(recursor.ModeValidate, "")
		_, res, err := resolveDO(t, r, "www.secure.test.", dns.TypeA, true, false)
		if res.State != dnssec.Bogus || res.EDE != dns.ExtendedErrorCodeDNSKEYMissing || !errors.Is(err, recursor.ErrAllFailed) {
			t.Errorf("built-in anchors on the lab: %v, %v; want bogus DNSKEY Missing", res, err)
		}
	})
}

func TestDNSSECConfig(t *testing.T) {
	for _, cfg := range []recursor.Config{
		{DNSSEC: 7},
		{DNSSEC: recursor.ModeValidate, TrustAnchors: "example. A 192.0.2.1"},
		{DNSSEC: recursor.ModeValidate, TrustAnchors: "not a zone file ((("},
		{DNSSEC: recursor.ModeValidate, NTA: []string{"a..b"}},
		{DNSSEC: recursor.ModeValidate, SigSkew: -1},
	} {
		if _, err := recursor.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	for s, m := range map[string]recursor.Mode{"off": recursor.ModeOff, "process": recursor.ModeProcess, "validate": recursor.ModeValidate} {
		if got, err := recursor.ParseMode(s); err != nil || got != m || got.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := recursor.ParseMode("process-no-validate"); err == nil {
		t.Error("ParseMode accepted process-no-validate")
	}
}

// TestDNSSECConcurrent validates the DNSSEC cases from 8 goroutines on one
// fresh recursor (run with -race: the key and signature caches are
// shared): every result is the one a lone query gets.
func TestDNSSECConcurrent(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	lab := dnslab.Start(t, dnslab.Standard())
	mod := func(c *recursor.Config) { c.DNSSEC, c.TrustAnchors = recursor.ModeValidate, lab.TrustAnchor }
	lone, r := newLabRecursor(t, lab.Hints, mod), newLabRecursor(t, lab.Hints, mod)
	type outcome struct {
		rcode int
		ad    bool
		state dnssec.State
		ede   uint16
	}
	run := func(r *recursor.Recursor, c secCase) outcome {
		q := question(c.name, c.qtype)
		q.SetEdns0(1232, true)
		m, res, err := r.Resolve(context.Background(), q)
		if err != nil {
			return outcome{dns.RcodeServerFailure, false, res.State, res.EDE}
		}
		return outcome{m.Rcode, m.AuthenticatedData, res.State, res.EDE}
	}
	want := make([]outcome, len(secCases))
	for i, c := range secCases {
		want[i] = run(lone, c)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(secCases))
	for g := range 8 {
		wg.Go(func() {
			for k := range secCases {
				i := (k + g*5) % len(secCases)
				if got := run(r, secCases[i]); got != want[i] {
					errs <- fmt.Sprintf("%s %s: %+v, want %+v", secCases[i].name, dns.TypeToString[secCases[i].qtype], got, want[i])
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
