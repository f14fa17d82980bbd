package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// TestSettingsAfterSession: a session whose organisation's settings reach
// the node only after it (a RADIUS Start for a new organisation, a deploy
// whose settings step comes later) gets them once they arrive.
func TestSettingsAfterSession(t *testing.T) {
	ports := freePorts(t, 3)
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	_, _, js := startNATSOn(t, ports[0])
	sessKV := natstest.CreateBucket(t, js, session.Bucket)
	setKV := natstest.CreateBucket(t, js, settings.Bucket)
	natstest.Put(t, setKV, settings.GlobalKey, []byte(`{}`))

	runResolver(t, testResolverConfig(t, ports))
	waitHealth(t, base, http.StatusOK, 30*time.Second)

	s := session.Session{ID: "late1", Org: "netco", Allocations: []netip.Prefix{netip.MustParsePrefix("127.0.0.42/32")},
		Attributes: identity.Attributes{Username: "dave"}, UpdatedAt: time.Now()}
	b, _ := json.Marshal(s)
	natstest.Put(t, sessKV, s.ID, b)
	verdict := func() string {
		v, _ := fromDNS(dnsFrom(t, "127.0.0.42", dnsAddr, "blocked.test", dns.TypeA, dns.ClassINET))
		return v
	}
	natstest.Eventually(t, "the session on the node, allowed", func() (bool, string) {
		_, body := httpGet(t, base+"/health")
		return strings.Contains(body, `"ok"`) && verdict() == "allow", body
	})
	time.Sleep(200 * time.Millisecond)
	if v := verdict(); v != "allow" {
		t.Fatalf("before the settings: %s", v)
	}
	natstest.Put(t, setKV, settings.Key("netco", settings.Scope{Kind: settings.ScopeUsername, Value: "dave"}), []byte(`{"blocklist":["blocked.test"]}`))
	natstest.Eventually(t, "the user's settings applied", func() (bool, string) {
		v := verdict()
		return v == "block", v
	})
}
