package resolver

import (
	"context"
	"net"
	"strings"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// ourUDPSize is the EDNS payload size we announce to clients (the DNS flag
// day 2020 value: no fragmentation on common paths).
const ourUDPSize = 1232

// blockedReply applies a decision that is not an allow (docs/policy.md's
// actions); nil means drop. A block carries an Extended DNS Error (15 Blocked
// for operator policy, 17 Filtered for the subscriber's own settings) when the client speaks EDNS.
func (r *Resolver) blockedReply(ctx context.Context, req *dns.Msg, q *query, d *policy.Decision, p *policy.Policy) *dns.Msg {
	qs := req.Question[0]
	ttl := uint32(r.cfg.BlockTTL.Seconds())
	m := new(dns.Msg)
	m.SetReply(req)
	switch d.Action {
	case policy.ActionDrop:
		q.shard.Inc(stats.PolicyDrops)
		return nil
	case policy.ActionTruncate:
		m.Truncated = true // the client asks again over TCP, where the rule does not apply
		return m
	case policy.ActionRefused:
		m.Rcode = dns.RcodeRefused
	case policy.ActionNXDomain:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa(qs.Name, ttl)}
	case policy.ActionNoData:
		m.Ns = []dns.RR{soa(qs.Name, ttl)}
	case policy.ActionRedirect:
		hdr := dns.RR_Header{Name: qs.Name, Class: dns.ClassINET, Ttl: ttl}
		switch qs.Qtype {
		case dns.TypeA, dns.TypeANY:
			for _, a := range d.A {
				h := hdr
				h.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: h, A: net.IP(a.AsSlice())})
			}
		}
		switch qs.Qtype {
		case dns.TypeAAAA, dns.TypeANY:
			for _, a := range d.AAAA {
				h := hdr
				h.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: h, AAAA: net.IP(a.AsSlice())})
			}
		}
		if qs.Qtype == dns.TypeTXT && len(d.TXT) > 0 {
			h := hdr
			h.Rrtype = dns.TypeTXT
			m.Answer = append(m.Answer, &dns.TXT{Hdr: h, Txt: chunks(d.TXT)})
		}
		if len(m.Answer) == 0 {
			m.Ns = []dns.RR{soa(qs.Name, ttl)} // NODATA: no local data of this type
		}
	case policy.ActionCNAME:
		target := dns.Fqdn(d.Target)
		if _, ok := dns.IsDomainName(target); !ok || len(target) > 255 {
			return errorReply(req, dns.RcodeServerFailure) // an RPZ wildcard target grown too long
		}
		m.Answer = []dns.RR{&dns.CNAME{Hdr: dns.RR_Header{Name: qs.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: ttl}, Target: target}}
		if qs.Qtype != dns.TypeCNAME {
			// Chase the target so that a stub resolver gets addresses
			// (safe search's names, a block page's name).
			sub := new(dns.Msg)
			sub.SetQuestion(target, qs.Qtype)
			if opt := req.IsEdns0(); opt != nil {
				sub.SetEdns0(ourUDPSize, opt.Do())
			}
			var buf [policy.MaxChain]string
			if chased, _ := r.forward(ctx, sub, q, buf[:0]); chased.Rcode == dns.RcodeSuccess {
				m.Answer = append(m.Answer, chased.Answer...)
			}
		}
	}
	if code, ok := d.EDE(p); ok && req.IsEdns0() != nil {
		m.SetEdns0(ourUDPSize, req.IsEdns0().Do())
		opt := m.IsEdns0()
		text := string(d.Reason) + ": " + d.Rule()
		if q.transport == policy.TransportDoT || q.transport == policy.TransportDoH {
			// Not packet-cached: the text may name the client's identity.
			text += "; identity: " + q.identityText()
		}
		opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: text})
	}
	return m
}

// soa is the SOA a synthesised negative answer carries, so that clients
// and the packet cache know how long to keep it (RFC 2308).
func soa(name string, ttl uint32) dns.RR {
	return &dns.SOA{
		Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:  "svc-pf.invalid.", Mbox: "hostmaster.svc-pf.invalid.",
		Serial: 1, Refresh: 1800, Retry: 900, Expire: 604800, Minttl: ttl,
	}
}

// chunks splits texts into TXT character-strings of at most 255 bytes.
func chunks(texts []string) []string {
	var out []string
	for _, t := range texts {
		for len(t) > 255 {
			out = append(out, t[:255])
			t = t[255:]
		}
		out = append(out, t)
	}
	return out
}

// debugReply answers a CHAOS TXT query for a name with the decision's
// trace for the asking client (dns.debug), as AdGuard DNS does: one TXT
// string per step.
func (r *Resolver) debugReply(req *dns.Msg, q *query) *dns.Msg {
	qs := req.Question[0]
	name := strings.ToLower(strings.TrimSuffix(qs.Name, "."))
	pq := &policy.Query{Input: policy.Input{Domain: name, Time: r.now(), Transport: q.transport}, IP: q.client}
	lines := []string{"client " + q.client.String()}
	if q.clientID != "" {
		// The client id's session first, else the address: as identify.
		pq.DeviceID = ClientIDDevicePrefix + q.clientID
		lines = append(lines, "identity used: "+q.identityText())
	}
	res := r.engine.Evaluate(pq)
	for _, st := range append(res.Steps, res.Trace...) {
		lines = append(lines, string(st.Step)+": "+st.Result)
	}
	lines = append(lines, "verdict "+string(res.Verdict)+", action "+string(res.Action)+", reason "+string(res.Reason)+", rule "+res.Rule())
	m := new(dns.Msg)
	m.SetReply(req)
	m.Answer = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: qs.Name, Rrtype: dns.TypeTXT, Class: dns.ClassCHAOS}, Txt: chunks(lines)}}
	return m
}

// finish completes a reply for the client: id, question as asked, flags,
// EDNS as the client spoke it; packed into dst when it is long enough (a
// new buffer otherwise; nil: always new), and over a datagram transport
// (UDP) cut to the client's size with TC set.
func finish(dst []byte, req, m *dns.Msg, t policy.Transport) ([]byte, error) {
	m.Id = req.Id
	m.Question = req.Question
	m.Response, m.RecursionAvailable, m.RecursionDesired = true, true, req.RecursionDesired
	m.CheckingDisabled = req.CheckingDisabled
	reqOpt := req.IsEdns0()
	var ede []dns.EDNS0
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if o.Option() == dns.EDNS0EDE {
				ede = append(ede, o)
			}
		}
	}
	extra := m.Extra[:0]
	for _, rr := range m.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			extra = append(extra, rr)
		}
	}
	m.Extra = extra
	size := dns.MinMsgSize
	if reqOpt != nil {
		m.SetEdns0(ourUDPSize, reqOpt.Do())
		m.IsEdns0().Option = ede
		size = max(int(reqOpt.UDPSize()), dns.MinMsgSize)
		size = min(size, ourUDPSize)
	}
	if t.Datagram() {
		m.Truncate(size)
	}
	m.Compress = true
	return m.PackBuffer(dst)
}
