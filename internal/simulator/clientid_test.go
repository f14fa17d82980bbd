package simulator

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// TestSimulateClientID: client_id finds the session with the device id
// clientid:<id> before ip, as the resolver does for an encrypted query; an
// unknown one falls back to ip; a bad one, or one beside deviceid, is a 400.
func TestSimulateClientID(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	code, m := f.get("/api/v1/simulate?domain=www.bad.example&ip=10.0.0.2&client_id=KID1")
	id, _ := m["identity"].(map[string]any)
	if code != 200 || id["by"] != "deviceid" || id["username"] != "kid" || id["deviceid"] != "clientid:kid1" ||
		m["verdict"] != "allow" {
		t.Fatalf("client_id kid1: %d %v", code, m)
	}
	code, m = f.get("/api/v1/simulate?domain=www.bad.example&ip=10.0.0.2&client_id=nobody")
	id, _ = m["identity"].(map[string]any)
	if code != 200 || id["by"] != "ip" || id["username"] != "alice" || m["verdict"] != "block" {
		t.Fatalf("unknown client_id: %d %v", code, m)
	}
	for _, q := range []string{"client_id=a_b", "client_id=" + strings.Repeat("a", 64), "client_id=kid1&deviceid=6d61633a30613162"} {
		if code, m := f.get("/api/v1/simulate?domain=a.example&" + q); code != 400 || m["error"] == nil {
			t.Errorf("%s: %d %v, want a 400 with an error", q, code, m)
		}
	}
}

// TestClientIDTable: client_id survives a script's table both ways.
func TestClientIDTable(t *testing.T) {
	q, _ := url.ParseQuery("domain=a.example&client_id=Kid1")
	r, err := ParseSimulate(q)
	if err != nil || r.ClientID != "kid1" || r.EffectiveDeviceID() != "clientid:kid1" {
		t.Fatalf("%+v %v", r, err)
	}
	back, err := FromTable(r.Table())
	if err != nil || back.ClientID != "kid1" || back.DeviceID != "" {
		t.Fatalf("FromTable: %+v %v", back, err)
	}
	tbl := r.Table()
	tbl["deviceid"] = "mac:0a1b"
	var br *BadRequest
	if _, err := FromTable(tbl); !errors.As(err, &br) {
		t.Fatalf("client_id and deviceid in a table: %v", err)
	}
}
