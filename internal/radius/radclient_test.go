package radius

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// radclient sends one accounting request with FreeRADIUS's radclient
// (its own dictionaries) and returns its output; err when it got no
// valid answer.
func radclient(t *testing.T, e *env, secret, attrs string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("radclient")
	if err != nil {
		t.Fatal("radclient not found: install the Debian package freeradius-utils")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Four tries two seconds apart, as a NAS retransmits: on a loaded
	// machine one IP Mapper round trip can outlast a single second.
	cmd := exec.CommandContext(ctx, bin, "-x", "-r", "4", "-t", "2", e.addr.String(), "acct", secret)
	cmd.Stdin = strings.NewReader(attrs)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestRadclientInterop(t *testing.T) {
	e := startEnv(t, nil)
	start := `Acct-Status-Type = Start
Acct-Session-Id = "rc-0001"
User-Name = "carol@example.net"
Framed-IP-Address = 100.64.10.5
Framed-IPv6-Prefix = 2001:db8:10::/64
Delegated-IPv6-Prefix = 2001:db8:1000::/56
Calling-Station-Id = "00-11-22-AA-BB-CC"
NAS-Identifier = "bras-1"
Event-Timestamp = 1800000000
`
	if out, err := radclient(t, e, testSecret, start); err != nil || !strings.Contains(out, "Accounting-Response") {
		t.Fatalf("radclient Start: %v\n%s", err, out)
	}
	ss := e.byIP("2001:db8:1000:ff::1")
	if len(ss) != 1 {
		t.Fatalf("no session for the delegated prefix: %+v", e.sessions("netco"))
	}
	if want := (identity.Attributes{Username: "carol", DeviceID: "mac:00:11:22:aa:bb:cc"}); ss[0].Org != "netco" || ss[0].Attributes != want || len(ss[0].Allocations) != 3 {
		t.Fatalf("session %+v", ss[0])
	}
	interim := `Acct-Status-Type = Interim-Update
Acct-Session-Id = "rc-0001"
User-Name = "carol@example.net"
Framed-IP-Address = 100.64.10.6
Acct-Session-Time = 300
Event-Timestamp = 1800000300
`
	if out, err := radclient(t, e, testSecret, interim); err != nil {
		t.Fatalf("radclient Interim-Update: %v\n%s", err, out)
	}
	if got := e.byIP("100.64.10.6"); len(got) != 1 || got[0].ID != ss[0].ID {
		t.Fatalf("interim not applied: %+v", e.sessions("netco"))
	}
	stop := `Acct-Status-Type = Stop
Acct-Session-Id = "rc-0001"
User-Name = "carol@example.net"
Acct-Session-Time = 400
Event-Timestamp = 1800000400
`
	if out, err := radclient(t, e, testSecret, stop); err != nil {
		t.Fatalf("radclient Stop: %v\n%s", err, out)
	}
	if got := e.sessions("netco"); len(got) != 0 {
		t.Fatalf("after Stop: %+v", got)
	}
	// A wrong secret gets no answer at all.
	if out, err := radclient(t, e, "not-the-secret", start); err == nil {
		t.Fatalf("radclient with a wrong secret got an answer:\n%s", out)
	}
	if got := e.count("dropped", dropBadAuthenticator); got < 1 {
		t.Fatalf("bad_authenticator = %v", got)
	}
}
