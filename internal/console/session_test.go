package console

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestSessionStore: a session ends at its expiry, the store keeps at most
// max (the one nearest its end goes first), and ending a token ends its
// sessions only.
func TestSessionStore(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	s := newSessionStore(time.Hour, 2, func() time.Time { return now })
	a, _ := s.create("sa", "ta")
	now = now.Add(time.Minute)
	b, _ := s.create("sb", "tb")
	now = now.Add(time.Minute)
	c, sc := s.create("sc", "tb")
	if _, ok := s.get(a); ok {
		t.Error("the oldest session outlived the bound")
	}
	if si, ok := s.get(b); !ok || si.secret != "sb" || si.csrf == sc.csrf {
		t.Errorf("session b: %+v %v", si, ok)
	}
	s.endToken("tb")
	if _, ok := s.get(b); ok {
		t.Error("b outlived its token")
	}
	if _, ok := s.get(c); ok {
		t.Error("c outlived its token")
	}
	d, _ := s.create("sd", "td")
	now = now.Add(time.Hour)
	if _, ok := s.get(d); ok {
		t.Error("a session outlived its expiry")
	}
	if a == b || len(a) < 43 {
		t.Errorf("session ids %q %q", a, b)
	}
}

// TestCookieSecureOverTLS: the session cookie is Secure when the request
// came over TLS, and never readable by scripts or sent cross-site.
func TestCookieSecureOverTLS(t *testing.T) {
	plain := httptest.NewRequest(http.MethodGet, "http://console.test/ui/", nil)
	tlsReq := httptest.NewRequest(http.MethodGet, "https://console.test/ui/", nil)
	tlsReq.TLS = &tls.ConnectionState{}
	for _, c := range []struct {
		r      *http.Request
		secure bool
	}{{plain, false}, {tlsReq, true}} {
		ck := cookie(c.r, sessionCookie, "v", 60)
		if ck.Secure != c.secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != Prefix {
			t.Errorf("TLS %v: %+v", c.secure, ck)
		}
	}
}
