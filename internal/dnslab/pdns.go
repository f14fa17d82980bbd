package dnslab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/miekg/dns"
)

// PdnsOptions configures the second reference resolver, PowerDNS
// Recursor.
type PdnsOptions struct {
	// Validate runs with dnssec=validate and the lab's root trust anchor;
	// otherwise dnssec=process-no-validate (DNSSEC records asked for and
	// passed on, nothing validated, never AD).
	Validate bool
	// Extra is appended to recursor.conf as is (key=value lines).
	Extra string
	// Lua is appended to the Lua configuration file as is (addTA,
	// rpzFile, …).
	Lua string
}

// StartPdnsRecursor starts pdns_recursor (in the foreground, no systemd)
// on the lab's second reference address, port 53, with a configuration
// directory of its own, the lab's root hints and, when validating, the
// lab's root DS as its only trust anchor; it returns that address once it
// answers and stops with the test.
func (l *Lab) StartPdnsRecursor(o PdnsOptions) netip.AddrPort {
	t := l.t
	t.Helper()
	Need(t, "/usr/sbin/pdns_recursor", "pdns-recursor")
	dir, addr := l.reference("pdns", o.Validate)
	mode := "process-no-validate"
	// The built-in root anchors are IANA's, which the lab's root does not
	// match: they go, and the lab's DS replaces them.
	lua := "clearTA()\n"
	if o.Validate {
		mode = "validate"
		rr, err := dns.NewRR(l.TrustAnchor)
		if err != nil {
			t.Fatalf("dnslab: trust anchor %q: %v", l.TrustAnchor, err)
		}
		ds, ok := rr.(*dns.DS)
		if !ok {
			t.Fatalf("dnslab: trust anchor %q is not a DS", l.TrustAnchor)
		}
		content := strings.TrimSpace(strings.TrimPrefix(ds.String(), ds.Hdr.String()))
		lua += fmt.Sprintf("addTA(%q, %q)\n", ds.Hdr.Name, content)
	}
	lua += o.Lua
	luaFile := filepath.Join(dir, "recursor.lua")
	if err := os.WriteFile(luaFile, []byte(lua), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "pdns.log")
	conf := fmt.Sprintf(`local-address=%s
local-port=53
allow-from=127.0.0.0/8
# The lab's servers are on loopback addresses, which pdns_recursor does
# not ask by default.
dont-query=
hint-file=%s
lua-config-file=%s
dnssec=%s
config-dir=%s
socket-dir=%s
daemon=no
write-pid=no
threads=1
pdns-distributes-queries=no
reuseport=no
disable-syslog=yes
log-timestamp=no
loglevel=4
quiet=yes
security-poll-suffix=
# Answers name the extended error of a bogus answer, as the resolver's do.
extended-resolution-errors=yes
# Serve nothing itself that the lab serves (test. is a lab TLD).
serve-rfc1918=no
%s
`, addr.Addr(), l.HintsFile(), luaFile, mode, dir, dir, o.Extra)
	if err := os.WriteFile(filepath.Join(dir, "recursor.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	l.startProcess("pdns_recursor", logFile, "/usr/sbin/pdns_recursor", "--config-dir="+dir)
	// localhost. is answered by pdns_recursor itself.
	l.awaitLocalhost("pdns_recursor", addr)
	return addr
}
