package dnslab

import (
	"slices"

	"github.com/miekg/dns"
)

// Standard is the lab most tests use: a signed root; a signed TLD test. and
// an unsigned one, example.; below test.: a signed zone (secure.test.) with
// a signed child delegated with glue (sub.secure.test.), an unsigned zone
// without DS (insecure.test.), a zone whose only nameserver is out of
// bailiwick and must be resolved on its own (outofzone.test., served by
// ns.hosting.example.), a lame delegation (lame.test.: its server serves
// nothing and answers REFUSED) and a half-lame one (partial.test.: one lame
// server, one good). secure.test. holds a wildcard, CNAME chains (within the
// zone, into the insecure zone across a cut, into another TLD, a loop and
// one longer than a resolver follows).
//
// Zones signed in ways a validator must tell apart, all served by sld:
// expired.test. and future.test. (signatures out of their validity
// period), wrongds.test. (the DS matches no key of the zone), badsig.test.
// and nosig.test. (www's signatures corrupted or missing): bogus;
// nsec3.test. (NSEC3, with a wildcard) secure; optout.test. (NSEC3 opt-out)
// with an unsigned child child.optout.test. (insecure); island.test.
// (signed, no DS: insecure).
//
// Servers: root (ns.root.), tldtest, tldexample, sld (secure.test.,
// insecure.test., partial.test. and the zones above), oob, lame, sub
// (sub.secure.test., child.optout.test.).
func Standard() Desc {
	return Desc{
		Servers: []Server{
			{Name: "root", Host: "ns.root.", Zones: []string{"."}},
			{Name: "tldtest", Host: "ns.nic.test.", Zones: []string{"test."}},
			{Name: "tldexample", Host: "ns.nic.example.", Zones: []string{"example."}},
			{Name: "sld", Host: "ns1.secure.test.", Zones: []string{"secure.test.", "insecure.test.", "partial.test.",
				"expired.test.", "future.test.", "wrongds.test.", "badsig.test.", "nosig.test.", "nsec3.test.", "optout.test.", "island.test."}},
			{Name: "oob", Host: "ns.hosting.example.", Zones: []string{"outofzone.test."}},
			{Name: "lame", Host: "ns.lame.test."},
			{Name: "sub", Host: "ns.sub.secure.test.", Zones: []string{"sub.secure.test.", "child.optout.test."}},
		},
		Zones: []Zone{
			{Name: ".", Signed: true, Records: `
@ SOA ns.root. hostmaster.root. 1 3600 600 86400 300
@ NS ns.root.
ns.root. A %root%
test. NS ns.nic.test.
ns.nic.test. A %tldtest%
example. NS ns.nic.example.
ns.nic.example. A %tldexample%
`},
			{Name: "test.", Signed: true, Records: `
@ SOA ns.nic hostmaster.nic 1 3600 600 86400 300
@ NS ns.nic
ns.nic A %tldtest%
www A 192.0.2.1
secure NS ns1.secure
ns1.secure A %sld%
insecure NS ns1.insecure
ns1.insecure A %sld%
outofzone NS ns.hosting.example.
lame NS ns.lame
ns.lame A %lame%
partial NS ns.lame
partial NS ns1.secure
expired NS ns1.secure
future NS ns1.secure
wrongds NS ns1.secure
badsig NS ns1.secure
nosig NS ns1.secure
nsec3 NS ns1.secure
optout NS ns1.secure
island NS ns1.secure
`},
			{Name: "secure.test.", Signed: true, Records: `
@ SOA ns1 hostmaster 1 3600 600 86400 300
@ NS ns1
ns1 A %sld%
@ MX 10 mail
www A 192.0.2.10
www AAAA 2001:db8::10
mail A 192.0.2.11
txt TXT "hello world"
*.wild A 192.0.2.12
*.wild TXT "wildcard"
c1 CNAME c2
c2 CNAME www
toinsecure CNAME www.insecure.test.
toexample CNAME www.example.
tooutofzone CNAME www.outofzone.test.
tonx CNAME nx.insecure.test.
loop1 CNAME loop2
loop2 CNAME loop1
x1 CNAME x2.insecure.test.
x3 CNAME x4.insecure.test.
x5 CNAME x6.insecure.test.
x7 CNAME x8.insecure.test.
x9 CNAME x10.insecure.test.
x11 CNAME x12.insecure.test.
x13 CNAME x14.insecure.test.
dname DNAME insecure.test.
sub NS ns.sub
ns.sub A %sub%
`},
			{Name: "sub.secure.test.", Signed: true, Records: `
@ SOA ns hostmaster 1 3600 600 86400 300
@ NS ns
ns A %sub%
www A 192.0.2.60
`},
			{Name: "expired.test.", Signed: true, Break: Expired, Records: bogusZone},
			{Name: "future.test.", Signed: true, Break: NotYetValid, Records: bogusZone},
			{Name: "wrongds.test.", Signed: true, Break: WrongDS, Records: bogusZone},
			{Name: "badsig.test.", Signed: true, Break: BadSig, BreakName: "www", Records: bogusZone},
			{Name: "nosig.test.", Signed: true, Break: NoSig, BreakName: "www", Records: bogusZone},
			{Name: "nsec3.test.", Signed: true, NSEC3: true, Records: bogusZone + "*.wild A 192.0.2.81\n"},
			{Name: "optout.test.", Signed: true, NSEC3: true, OptOut: true, Records: bogusZone + `
child NS ns.child
ns.child A %sub%
`},
			{Name: "child.optout.test.", Records: `
@ SOA ns hostmaster 1 3600 600 86400 300
@ NS ns
ns A %sub%
www A 192.0.2.82
`},
			{Name: "island.test.", Signed: true, NoDS: true, Records: bogusZone},
			{Name: "insecure.test.", Records: `
@ SOA ns1 hostmaster 1 3600 600 86400 300
@ NS ns1
ns1 A %sld%
www A 192.0.2.20
back CNAME www.secure.test.
x2 CNAME x3.secure.test.
x4 CNAME x5.secure.test.
x6 CNAME x7.secure.test.
x8 CNAME x9.secure.test.
x10 CNAME x11.secure.test.
x12 CNAME x13.secure.test.
x14 A 192.0.2.21
`},
			{Name: "partial.test.", Records: `
@ SOA ns1.secure.test. hostmaster 1 3600 600 86400 300
@ NS ns.lame.test.
@ NS ns1.secure.test.
www A 192.0.2.30
`},
			{Name: "outofzone.test.", Records: `
@ SOA ns.hosting.example. hostmaster 1 3600 600 86400 300
@ NS ns.hosting.example.
www A 192.0.2.40
`},
			{Name: "example.", Records: `
@ SOA ns.nic hostmaster.nic 1 3600 600 86400 300
@ NS ns.nic
ns.nic A %tldexample%
ns.hosting A %oob%
www A 192.0.2.50
`},
		},
	}
}

// bogusZone is the content of the small signed zones that differ only in
// how they are signed: an apex, a server name and www.
const bogusZone = `
@ SOA ns1.secure.test. hostmaster 1 3600 600 86400 300
@ NS ns1.secure.test.
www A 192.0.2.80
txt TXT "signed"
`

// WithSilentServer returns d (the standard lab, or one with its test. zone
// and its sld and lame servers) with a server that never answers, "silent"
// (ns.silent.test., a Go handler that reads queries and drops them): the
// only server of dead.test., one of the two of halfdead.test. (whose other
// server, sld, serves it) and of lamedead.test. (whose other server is the
// lame one: nothing answers for it); and private.test., delegated to a
// server on 10.53.0.1, which a recursor's dont-query bars. For the
// recursor's handling of servers that time out or may not be asked:
// throttling, the failed servers' count, dropping an NS set that does not
// work, dont-query.
func WithSilentServer(d Desc) Desc {
	d.Servers = append(slices.Clone(d.Servers), Server{Name: "silent", Host: "ns.silent.test.",
		Zones: []string{"dead.test."}, Handler: dns.HandlerFunc(func(dns.ResponseWriter, *dns.Msg) {})})
	d.Zones = slices.Clone(d.Zones)
	for i := range d.Servers {
		if d.Servers[i].Name == "sld" {
			d.Servers[i].Zones = append(slices.Clone(d.Servers[i].Zones), "halfdead.test.")
		}
	}
	for i := range d.Zones {
		if d.Zones[i].Name == "test." {
			d.Zones[i].Records += `
ns.silent A %silent%
dead NS ns.silent
halfdead NS ns.silent
halfdead NS ns1.secure
lamedead NS ns.silent
lamedead NS ns.lame
private NS ns.private
ns.private A 10.53.0.1
`
		}
	}
	d.Zones = append(d.Zones, Zone{Name: "halfdead.test.", Records: `
@ SOA ns1.secure.test. hostmaster 1 3600 600 86400 300
@ NS ns.silent.test.
@ NS ns1.secure.test.
www A 192.0.2.90
`})
	return d
}
